import Foundation
import GRDB

/// Haul's persistent state: tasks, their segments and validators, in SQLite.
///
/// It and the statements it composes (``TaskTables``, Store+Migrations) are all that know SQL. Safe to share between tasks and between processes: the
/// file is in WAL mode and opened with a busy timeout, as a `DatabasePool` (or, for a process
/// that downloads one file at a time, a `DatabaseQueue`: ``Readers``), so several `haul`
/// processes on one store wait for each other instead of failing or corrupting it.
public final class Store: TaskStore {
    let writer: any DatabaseWriter
    /// Every write of a body of statements goes through it, so that writes at once share transactions.
    let commits: GroupCommit

    /// A store over an open database, migrated; see Store+Opening for the ways to open one.
    init(writer: any DatabaseWriter) throws {
        self.writer = writer
        commits = GroupCommit(writer: writer)
        let superseded: Bool
        do {
            // On the writer: a pool's reader opened before the migration would keep the old
            // columns of the tables it looked at (GRDB's per-connection schema cache), and
            // then not find columns the migration adds.
            superseded = try writer.writeWithoutTransaction { db in try Store.isSuperseded(db, by: Store.migrator) }
        } catch {
            throw HaulError(.store, "Cannot read the Haul store", underlying: error)
        }
        if superseded {
            throw HaulError(
                .store,
                "The Haul store was written by a newer version of Haul",
                hint: "Use that version, or point HAUL_HOME at another directory"
            )
        }
        do {
            try Store.migrator.migrate(writer)
        } catch {
            throw HaulError(.store, "Cannot migrate the Haul store", underlying: error)
        }
    }

    // MARK: Reading

    package func task(id: UUID) async throws -> TaskRecord? {
        try await read { db in try TaskTables.task(db, id: id) }
    }

    package func tasks(ids: [UUID]) async throws -> [TaskRecord] {
        try await read { db in
            try ids.compactMap { try TaskTables.task(db, id: $0) }.sorted { $0.queueOrder < $1.queueOrder }
        }
    }

    /// A task and its segments, read together.
    package func taskWithSegments(_ id: UUID) async throws -> (TaskRecord, [SegmentRecord])? {
        try await read { db in
            guard let task = try TaskTables.task(db, id: id) else { return nil }
            return (task, try TaskTables.segments(db, of: task))
        }
    }

    /// What a run of a task reads first — the task with its piece hashes, and its segments —
    /// in one read, on the writer's connection with the writes of the moment (``GroupCommit``):
    /// a reader's cache is stale after every commit (a daemon commits every millisecond or so),
    /// and it read the task's pages again from the log, ten reads a start; the writer's is not.
    package func taskForRun(_ id: UUID) async throws -> (TaskRecord, [SegmentRecord])? {
        try await write { db in
            guard var task = try TaskTables.task(db, id: id) else { return nil }
            task.storedPieces = .some(try Store.pieces(db, of: id))
            return (task, try TaskTables.segments(db, of: task))
        }
    }

    /// The most recent task for this URL going into this directory (with this name, when the
    /// user fixed it), so rerunning a command continues it instead of starting over.
    package func findTask(url: URL, directory: String, fileName: String?) async throws -> TaskRecord? {
        try await read { db in try TaskTables.findTask(db, url: url, directory: directory, fileName: fileName) }
    }

    /// Every task, oldest first, whatever it holds (a test's look at a store).
    package func allTasks() async throws -> [TaskRecord] {
        try await read { db in try TaskRecord.order(TaskRecord.Columns.createdAt).fetchAll(db) }
    }

    // MARK: Writing

    /// Inserts a task at the back of the waiting line; returns it with its queue position.
    @discardableResult
    package func insert(_ task: TaskRecord, segments: [SegmentRecord]) async throws -> TaskRecord {
        try await write { db in
            var task = task
            task.queueOrder = try TaskTables.nextQueueOrder(db)
            try TaskTables.insert(db, task)
            if let pieces = task.pieces { try Store.insertPieces(db, taskID: task.id, hashes: pieces) }
            try TaskTables.insert(db, segments)
            return task
        }
    }

    /// Finds the unfinished-or-completed task for each new one's URL and destination and
    /// applies its re-add, or inserts it with one empty segment, in order: one transaction
    /// (SQLite's IMMEDIATE), so adds racing in this process or others never create two (a
    /// unique index backs that); all are found or recorded, or (when one is refused or a
    /// write fails) none.
    /// - Parameter accept: sees each existing task before anything changes; throws to refuse.
    package func findOrInsert(
        _ items: [(new: TaskRecord, reAdd: TaskReAdd)],
        accept: @escaping @Sendable (TaskRecord) throws -> Void
    ) async throws -> [(record: TaskRecord, segments: [SegmentRecord], isNew: Bool)] {
        try await write { db in
            var order = try TaskTables.nextQueueOrder(db)
            return try items.map { new, reAdd in
                if var existing = try TaskTables.findTask(
                    db,
                    url: new.url,
                    directory: new.directory,
                    fileName: new.explicitName ? new.fileName : nil
                ) {
                    try accept(existing)
                    reAdd.apply(to: &existing)
                    try TaskTables.applyReAdd(db, reAdd, to: existing.id)
                    // Piece hashes a task did not have yet (added again from a Metalink) are kept.
                    if let pieces = new.pieces { try Store.insertPieces(db, taskID: existing.id, hashes: pieces) }
                    return (existing, try TaskTables.segments(db, of: existing), false)
                }
                var task = new
                task.queueOrder = order
                order += 1
                try TaskTables.insert(db, task)
                if let pieces = task.pieces { try Store.insertPieces(db, taskID: task.id, hashes: pieces) }
                let segments = [SegmentRecord(taskID: task.id, ordinal: 0, start: 0, end: nil, committed: 0)]
                try TaskTables.insert(db, segments)
                return (task, segments, true)
            }
        }
    }

    /// Inserts many new tasks, each with one empty segment, in one transaction, in order.
    package func insertMany(_ tasks: [TaskRecord]) async throws {
        try await write { db in
            var order = try TaskTables.nextQueueOrder(db)
            for var task in tasks {
                task.queueOrder = order
                order += 1
                try TaskTables.insert(db, task)
                if let pieces = task.pieces { try Store.insertPieces(db, taskID: task.id, hashes: pieces) }
                try TaskTables.insert(
                    db,
                    [SegmentRecord(taskID: task.id, ordinal: 0, start: 0, end: nil, committed: 0)]
                )
            }
        }
    }

    /// Puts a task in the waiting line in `state`, at the back or, `keepingPlace`, where it
    /// was; returns its position.
    package func requeue(_ id: UUID, state: TaskState, keepingPlace: Bool) async throws -> Int64 {
        try await write { db in
            let kept =
                keepingPlace
                ? try Int64.fetchOne(db, sql: "SELECT queueOrder FROM task WHERE id = ?", arguments: [id]) : nil
            let order = try kept ?? TaskTables.nextQueueOrder(db)
            try db.execute(
                sql:
                    """
                    UPDATE task SET state = ?, queueOrder = ?, queuedAt = ?, errorMessage = NULL, errorCode = NULL,
                        nextTryAt = NULL,
                        retryingSince = NULL, updatedAt = ? WHERE id = ?
                    """,
                arguments: [state.rawValue, order, StoreDate.now, StoreDate.now, id]
            )
            return order
        }
    }

    /// Gives `ids` the places in the queue they hold between them, in the order given
    /// (their queue orders, sorted, handed out again); returns each one's new order.
    package func reorder(_ ids: [UUID]) async throws -> [UUID: Int64] {
        try await write { db in try TaskTables.reorder(db, ids) }
    }

    package func setSources(_ id: UUID, url: URL, sources: [DownloadSource]) async throws {
        let text = sources.isEmpty ? nil : try TaskRecord.json(sources)
        try await write { db in
            try db.execute(
                sql: "UPDATE task SET url = ?, sources = ?, updatedAt = ? WHERE id = ?",
                arguments: [url.absoluteString, text, StoreDate.now, id]
            )
        }
    }

    package func setPriority(_ id: UUID, _ priority: Int) async throws {
        try await write { db in
            try db.execute(sql: "UPDATE task SET priority = ? WHERE id = ?", arguments: [priority, id])
        }
    }

    package func tasks(
        inStates states: [TaskState],
        background: Bool?,
        after: Int64?,
        limit: Int?
    ) async throws -> [TaskRecord] {
        try await read { db in
            try TaskTables.tasks(db, inStates: states, background: background, after: after, limit: limit)
        }
    }

    package func infos(
        ids: [UUID]? = nil,
        background: Bool? = nil,
        session: String? = nil
    ) async throws
        -> [DownloadInfo]
    {
        try await read { db in try TaskTables.infos(db, ids: ids, background: background, session: session) }
    }

    package func infos(page: TaskPage, background: Bool?, session: String?) async throws -> [DownloadInfo] {
        try await read { db in try TaskTables.infos(db, background: background, session: session, page: page) }
    }

    /// Records a task re-created from resume data — request, response, part file, state and
    /// segments, every group at once — inserting it when this store has never seen it. Only
    /// for a task that is not running: nothing else writes its columns meanwhile.
    package func adopt(_ task: TaskRecord, segments: [SegmentRecord]) async throws {
        try await write { db in
            var task = task
            task.updatedAt = Date()
            if try TaskRecord.exists(db, key: task.id) {
                try task.update(db)
            } else {
                task.queueOrder = try TaskTables.nextQueueOrder(db)
                try TaskTables.insert(db, task)
            }
            // Piece hashes the task has none of yet (INSERT OR IGNORE: its own stand).
            if let pieces = task.pieces { try Store.insertPieces(db, taskID: task.id, hashes: pieces) }
            try TaskTables.replaceSegments(db, of: task.id, with: segments)
        }
    }

    /// Records what a transfer learnt from a response — final URL, file name, validators,
    /// length — and replaces the segments, in one transaction. Leaves the columns others
    /// own (state, priority, queue order) alone.
    /// - Parameter part: a part file just made for the task, recorded as its own in the same
    ///   transaction unless another task records that path (see ``claimPart(_:path:identity:)``).
    /// - Parameter recordingRunning: the run's "running" state, recorded in the same transaction.
    /// - Returns: whether `part` was recorded (false without one).
    @discardableResult
    package func saveResponse(
        _ task: TaskRecord,
        segments: [SegmentRecord],
        claimingPart part: (path: String, identity: String?)? = nil,
        recordingRunning: Bool = false
    ) async throws -> Bool {
        let sources = task.sources.isEmpty ? nil : try TaskRecord.json(task.sources)
        return try await write { db in
            // The part is claimed unless another task records that path.
            let claimed = try part.map { try !TaskTables.isPartPathTaken(db, $0.path, byOtherThan: task.id) } ?? false
            try TaskTables.recordResponse(
                db,
                task,
                sources: sources,
                part: claimed ? part : nil,
                running: recordingRunning
            )
            try TaskTables.replaceSegments(db, of: task.id, with: segments)
            return claimed
        }
    }

    /// Records a download's segments with their committed offsets, and its sources when they
    /// changed (a mirror's validators must be durable with the bytes it served), in one
    /// transaction. Call only after the part file was synced up to those offsets.
    /// - Parameter verifiedPieces: the bitmap of verified pieces, when it changed (only pieces
    ///   whose bytes are among those synced).
    package func checkpoint(
        _ id: UUID,
        segments: [SegmentRecord],
        sources: [DownloadSource]? = nil,
        verifiedPieces: [UInt8]? = nil,
        completing: Bool = false
    ) async throws {
        let sourcesText = try sources.map { try TaskRecord.json($0) }
        try await write { db in
            if completing { try TaskTables.setState(db, id, .completed, error: nil, code: nil, forgettingPart: true) }
            try TaskTables.replaceSegments(db, of: id, with: segments)
            if let verifiedPieces {
                try db.cachedStatement(
                    sql: "UPDATE piece SET verified = ? WHERE taskID = ?"
                ).execute(
                    arguments: [Data(verifiedPieces), id]
                )
            }
            if let sourcesText {
                try db.cachedStatement(
                    sql: "UPDATE task SET sources = ?, updatedAt = ? WHERE id = ?"
                ).execute(
                    arguments: [sourcesText, StoreDate.now, id]
                )
            } else if !completing {  // The state's change set it.
                try db.cachedStatement(sql: "UPDATE task SET updatedAt = ? WHERE id = ?").execute(arguments: [
                    StoreDate.now, id,
                ])
            }
        }
    }

    /// Records the part file a task created (the transfer owns these columns).
    package func setPart(_ id: UUID, path: String?, identity: String?) async throws {
        try await write { db in
            try db.cachedStatement(
                sql: "UPDATE task SET partPath = ?, partIdentity = ?, updatedAt = ? WHERE id = ?"
            ).execute(
                arguments: [path, identity, StoreDate.now, id]
            )
        }
    }

    /// Whether another task than `id` records `path` as its part file.
    package func isPartPathTaken(_ path: String, byOtherThan id: UUID) async throws -> Bool {
        try await read { db in
            try TaskRecord.filter(TaskRecord.Columns.partPath == path && TaskRecord.Columns.id != id).fetchCount(db) > 0
        }
    }

    /// Records `path` as the part file of task `id` unless another task records it: false
    /// then, and nothing changes. The check and the record are one transaction.
    package func claimPart(_ id: UUID, path: String, identity: String?) async throws -> Bool {
        try await write { db in try TaskTables.claimPart(db, id, path: path, identity: identity) }
    }

    /// Records the rate limit of tasks.
    package func setRateLimit(_ bytesPerSecond: Int64?, for ids: [UUID]) async throws {
        try await write { db in
            for id in ids {
                try db.cachedStatement(sql: "UPDATE task SET rateLimit = ? WHERE id = ?").execute(arguments: [
                    bytesPerSecond, id,
                ])
            }
        }
    }

    /// Records a task's state and, for a failure, its error (the state group).
    /// Records a state (and the error, for a failure). The time of a next try goes; the
    /// start of a streak of tries stays only while the task may still be retried (queued or
    /// running again, or failed for good: then it says since when it was tried).
    /// - Parameter code: the failure's ``HaulError/Code``, kept beside its message so that a
    ///   reader (`haul wait`) can tell its class.
    /// - Parameter forgettingPart: whether the task's part file is gone (moved into place):
    ///   its record goes in the same transaction.
    package func setState(
        _ id: UUID,
        _ state: TaskState,
        error: String? = nil,
        code: HaulError.Code? = nil,
        forgettingPart: Bool = false
    ) async throws {
        try await write { db in
            try TaskTables.setState(db, id, state, error: error, code: code, forgettingPart: forgettingPart)
        }
    }

    /// Records that a task waits to try again at `nextTryAt` after `error`, in a streak of
    /// tries that began at `since`.
    package func setRetrying(_ id: UUID, error: String, nextTryAt: Date, since: Date) async throws {
        try await write { db in
            try db.execute(
                sql: """
                    UPDATE task SET state = 'retrying', errorMessage = ?, nextTryAt = ?, retryingSince = ?, updatedAt = ?
                    WHERE id = ?
                    """,
                arguments: [error, StoreDate.text(nextTryAt), StoreDate.text(since), StoreDate.now, id]
            )
        }
    }

    package func delete(_ id: UUID) async throws {
        _ = try await write { db in try TaskRecord.deleteOne(db, key: id) }
    }
}
