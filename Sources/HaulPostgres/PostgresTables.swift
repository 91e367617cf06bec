import Foundation
import Haul
import Logging
import NIOCore
import PostgresNIO

/// The statements of Haul's tables in PostgreSQL (`haul_task`, `haul_segment`,
/// `haul_piece`) that ``PostgresStore`` composes into its transactions, each run on the pool
/// or on one connection (``PostgresQueryable``). Rows become records through ``TaskTable``.
/// Every write names the columns its writer owns (the request, the response, the state,
/// the part file), so writers of different groups never undo each other.
struct PostgresTables: Sendable {
    let logger: Logger

    func task(_ db: some PostgresQueryable, id: UUID) async throws -> TaskRecord? {
        try await tasks(db, where: "id = $1", binds: { $0.append(id) }).first
    }

    /// The tasks a condition selects (its `$n` bound by `binds`), in queue order unless the
    /// condition orders them itself.
    /// Tasks in any of `states` in queue order (``TaskStore/tasks(inStates:background:after:limit:)``).
    func tasks(
        _ db: some PostgresQueryable,
        inStates states: [TaskState],
        background: Bool?,
        after: Int64?,
        limit: Int?
    ) async throws -> [TaskRecord] {
        try await tasks(
            db,
            where: """
                state = ANY($1::text[]) AND ($2::boolean IS NULL OR background = $2)
                    AND ($3::bigint IS NULL OR "queueOrder" > $3)
                """,
            limit: limit,
            binds: {
                $0.append(states.map(\.rawValue))
                $0.append(background)
                $0.append(after)
            }
        )
    }

    func tasks(
        _ db: some PostgresQueryable,
        where condition: String,
        ordered: Bool = true,
        limit: Int? = nil,
        binds fill: (inout PostgresBindings) throws -> Void
    ) async throws -> [TaskRecord] {
        var binds = PostgresBindings()
        try fill(&binds)
        // Fixed text only: column names, the callers' conditions and a number, never input.
        let sql =
            "SELECT \(TaskTable.selectList) FROM haul_task WHERE \(condition)"
            + (ordered ? " ORDER BY \"queueOrder\"" : "") + (limit.map { " LIMIT \(max($0, 0))" } ?? "")
        var tasks: [TaskRecord] = []
        for try await row in try await db.rows(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger) {
            tasks.append(try TaskTable.record(row))
        }
        return tasks
    }

    /// A task's segments in order, checked (``SegmentRecord/checked(_:of:)``).
    func segments(
        _ db: some PostgresQueryable,
        of task: TaskRecord
    ) async throws
        -> [SegmentRecord]
    {
        var segments: [SegmentRecord] = []
        for try await (ordinal, start, end, committed) in try await db.rows(
            """
            SELECT ordinal, start, "end", committed FROM haul_segment WHERE "taskID" = \(task.id) ORDER BY ordinal
            """,
            logger: logger
        ).decode((Int64, Int64, Int64?, Int64).self) {
            segments.append(
                SegmentRecord(
                    taskID: task.id,
                    ordinal: TaskTable.int(ordinal),
                    start: start,
                    end: end,
                    committed: committed
                )
            )
        }
        return try SegmentRecord.checked(segments, of: task)
    }

    func pieces(_ db: some PostgresQueryable, of id: UUID) async throws -> StoredPieces? {
        for try await (algorithm, length, digests, verified) in try await db.rows(
            "SELECT algorithm, length, digests, verified FROM haul_piece WHERE \"taskID\" = \(id)",
            logger: logger
        ).decode((String, Int64, ByteBuffer, ByteBuffer?).self) {
            return try StoredPieces(
                task: id,
                algorithm: algorithm,
                length: length,
                digests: Array(buffer: digests),
                verified: verified.map { Array(buffer: $0) }
            )
        }
        return nil
    }

    func isPartPathTaken(
        _ db: some PostgresQueryable,
        _ path: String,
        byOtherThan id: UUID
    ) async throws -> Bool {
        for try await taken in try await db.rows(
            "SELECT EXISTS (SELECT 1 FROM haul_task WHERE \"partPath\" = \(path) AND id <> \(id))",
            logger: logger
        ).decode(Bool.self) {
            return taken
        }
        return false
    }

    /// Records `path` as `id`'s part file unless another task records it (false then).
    func claimPart(
        _ db: some PostgresQueryable,
        _ id: UUID,
        path: String,
        identity: String?
    ) async throws -> Bool {
        for try await _ in try await db.rows(
            """
            UPDATE haul_task SET "partPath" = \(path), "partIdentity" = \(identity), "updatedAt" = \(Date())
            WHERE id = \(id) AND NOT EXISTS (SELECT 1 FROM haul_task WHERE "partPath" = \(path) AND id <> \(id))
            RETURNING 1
            """,
            logger: logger
        ) {
            return true
        }
        return false
    }

    /// Records (or, with nil, forgets) `id`'s part file.
    func setPart(_ db: some PostgresQueryable, _ id: UUID, path: String?, identity: String?) async throws {
        _ = try await db.rows(
            """
            UPDATE haul_task SET "partPath" = \(path), "partIdentity" = \(identity), "updatedAt" = \(Date())
            WHERE id = \(id)
            """,
            logger: logger
        )
    }

    func setState(
        _ db: some PostgresQueryable,
        _ id: UUID,
        _ state: TaskState,
        error: String? = nil,
        code: HaulError.Code? = nil,
        forgettingPart: Bool = false
    ) async throws {
        let keepsStreak = state == .queued || state == .running || state == .failed
        _ = try await db.rows(
            """
            UPDATE haul_task SET state = \(state.rawValue), "errorMessage" = \(error),
                "errorCode" = \(code?.description), "nextTryAt" = NULL,
                "retryingSince" = CASE WHEN \(keepsStreak) THEN "retryingSince" ELSE NULL END,
                "updatedAt" = \(Date()),
                "partPath" = CASE WHEN \(forgettingPart) THEN NULL ELSE "partPath" END,
                "partIdentity" = CASE WHEN \(forgettingPart) THEN NULL ELSE "partIdentity" END,
                owner = CASE WHEN \(state == .running) THEN owner ELSE NULL END,
                lease_expires = CASE WHEN \(state == .running) THEN lease_expires ELSE NULL END
            WHERE id = \(id)
            """,
            logger: logger
        )
    }

    /// Locks task `id`'s row for the rest of the transaction and throws
    /// ``HaulError/Code/invalidArgument`` if it is completed: a stop decided on an older
    /// reading of it comes too late.
    func refuseIfCompleted(
        _ db: some PostgresQueryable,
        _ id: UUID,
        stopping state: TaskState
    ) async throws {
        for try await current in try await db.rows(
            "SELECT state FROM haul_task WHERE id = \(id) FOR UPDATE",
            logger: logger
        ).decode(String.self) where current == TaskState.completed.rawValue {
            let verb = state == .paused ? "pause" : state == .cancelled ? "cancel" : "fail"
            throw HaulError(
                .invalidArgument,
                "Cannot \(verb) task \(id): it completed meanwhile, on another node",
                hint: "Nothing changed; remove it if its file is not wanted"
            )
        }
    }

    func nextQueueOrder(_ db: some PostgresQueryable) async throws -> Int64 {
        for try await order in try await db.rows("SELECT nextval('haul_queue_order')", logger: logger)
            .decode(Int64.self)
        {
            return order
        }
        throw HaulError(.store, "PostgreSQL gave no queue position")
    }

    /// Inserts a new task (every column) at the back of the queue, with its piece hashes;
    /// returns it with its queue position.
    func insert(_ db: some PostgresQueryable, _ task: TaskRecord) async throws -> TaskRecord {
        var task = task
        task.queueOrder = try await nextQueueOrder(db)
        let values = try task.databaseDictionary
        var binds = PostgresBindings()
        for column in TaskTable.columns {
            try TaskTable.bind(values[column.name] ?? .null, of: column.name, task: task.id, to: &binds)
        }
        // And the host the fleet's per-host cap counts it under.
        binds.append(DownloadManager.hostKey(task.url))
        let placeholders = (1...TaskTable.columns.count + 1).map { "$\($0)" }.joined(separator: ", ")
        _ = try await db.rows(
            PostgresQuery(
                unsafeSQL: "INSERT INTO haul_task (\(TaskTable.selectList), host) VALUES (\(placeholders))",
                binds: binds
            ),
            logger: logger
        )
        if let pieces = task.pieces { try await insertPieces(db, taskID: task.id, pieces) }
        return task
    }

    /// Writes `columns` of a record (one group's), leaving the others as they are.
    func update(
        _ db: some PostgresQueryable,
        _ task: TaskRecord,
        columns: [String]
    ) async throws {
        let values = try task.databaseDictionary
        var binds = PostgresBindings()
        var assignments: [String] = []
        for (index, column) in columns.enumerated() {
            try TaskTable.bind(values[column] ?? .null, of: column, task: task.id, to: &binds)
            assignments.append("\"\(column)\" = $\(index + 1)")
        }
        binds.append(task.id)
        _ = try await db.rows(
            PostgresQuery(
                unsafeSQL:
                    "UPDATE haul_task SET \(assignments.joined(separator: ", ")) WHERE id = $\(columns.count + 1)",
                binds: binds
            ),
            logger: logger
        )
    }

    /// Inserts segments in one statement, however many.
    func insertSegments(_ db: some PostgresQueryable, _ segments: [SegmentRecord]) async throws {
        guard !segments.isEmpty else { return }
        _ = try await db.rows(
            """
            INSERT INTO haul_segment ("taskID", ordinal, start, "end", committed)
            SELECT task, ordinal, start, CASE WHEN open THEN NULL ELSE "end" END, committed
            FROM unnest(\(segments.map(\.taskID))::uuid[], \(segments.map { Int64($0.ordinal) })::bigint[],
                \(segments.map(\.start))::bigint[], \(segments.map { $0.end == nil })::boolean[],
                \(segments.map { $0.end ?? 0 })::bigint[], \(segments.map(\.committed))::bigint[])
                AS s(task, ordinal, start, open, "end", committed)
            """,
            logger: logger
        )
    }

    func replaceSegments(
        _ db: some PostgresQueryable,
        of id: UUID,
        with segments: [SegmentRecord]
    ) async throws {
        _ = try await db.rows("DELETE FROM haul_segment WHERE \"taskID\" = \(id)", logger: logger)
        try await insertSegments(db, segments)
    }

    /// Records piece hashes for a task that has none yet.
    func insertPieces(
        _ db: some PostgresQueryable,
        taskID: UUID,
        _ hashes: PieceHashes
    ) async throws {
        _ = try await db.rows(
            """
            INSERT INTO haul_piece ("taskID", algorithm, length, digests)
            VALUES (\(taskID), \(hashes.algorithm.name), \(hashes.length), \(ByteBuffer(bytes: hashes.digests)))
            ON CONFLICT ("taskID") DO NOTHING
            """,
            logger: logger
        )
    }

    /// Records which of a task's pieces are verified (one bit each).
    func setVerifiedPieces(_ db: some PostgresQueryable, _ id: UUID, _ verified: [UInt8]) async throws {
        _ = try await db.rows(
            "UPDATE haul_piece SET verified = \(ByteBuffer(bytes: verified)) WHERE \"taskID\" = \(id)",
            logger: logger
        )
    }

    /// Records that `id` waits to try again at `nextTryAt`, in a streak that began at
    /// `since`; its lease ends.
    func setRetrying(_ db: some PostgresQueryable, _ id: UUID, error: String, nextTryAt: Date, since: Date) async throws
    {
        _ = try await db.rows(
            """
            UPDATE haul_task SET state = 'retrying', "errorMessage" = \(error),
                "nextTryAt" = \(nextTryAt), "retryingSince" = \(since),
                "updatedAt" = \(Date()), owner = NULL, lease_expires = NULL
            WHERE id = \(id)
            """,
            logger: logger
        )
    }

    /// Puts `id` at the back of the queue (or, `keepingPlace`, where it was) in `state`
    /// (queued or paused), its error and lease gone; returns its position.
    func requeue(_ db: some PostgresQueryable, _ id: UUID, state: TaskState, keepingPlace: Bool) async throws -> Int64 {
        let rows = try await db.rows(
            """
            UPDATE haul_task SET state = \(state.rawValue),
                "queueOrder" = CASE WHEN \(keepingPlace) THEN "queueOrder" ELSE nextval('haul_queue_order') END,
                "queuedAt" = \(Date()), "errorMessage" = NULL, "errorCode" = NULL,
                "nextTryAt" = NULL, "retryingSince" = NULL, "updatedAt" = \(Date()),
                owner = NULL, lease_expires = NULL
            WHERE id = \(id) RETURNING "queueOrder"
            """,
            logger: logger
        )
        for try await order in rows.decode(Int64.self) { return order }
        return try await nextQueueOrder(db)  // No such task (any more): a place no task holds.
    }

    /// Records a task re-created from resume data — every group at once — inserting it when
    /// the store has never seen it, with its segments.
    func adopt(_ db: some PostgresQueryable, _ task: TaskRecord, segments: [SegmentRecord]) async throws {
        var task = task
        task.updatedAt = Date()
        if try await self.task(db, id: task.id) != nil {
            try await update(db, task, columns: TaskTable.columns.map(\.name).filter { $0 != "id" })
            if let pieces = task.pieces { try await insertPieces(db, taskID: task.id, pieces) }
        } else {
            task = try await insert(db, task)
        }
        try await replaceSegments(db, of: task.id, with: segments)
    }

    /// Gives `ids` the queue positions they hold between them, in the order given (rows
    /// locked); returns each one's position. Throws when one is not a task.
    func reorder(_ db: some PostgresQueryable, _ ids: [UUID]) async throws -> [UUID: Int64] {
        var orders: [UUID: Int64] = [:]
        for try await (id, order) in try await db.rows(
            "SELECT id, \"queueOrder\" FROM haul_task WHERE id = ANY(\(ids)::uuid[]) ORDER BY id FOR UPDATE",
            logger: logger
        ).decode((UUID, Int64).self) {
            orders[id] = order
        }
        if let missing = ids.first(where: { orders[$0] == nil }) { throw HaulError(.notFound, "No task \(missing)") }
        var result: [UUID: Int64] = [:]
        for (id, order) in zip(ids, ids.compactMap { orders[$0] }.sorted()) {
            _ = try await db.rows("UPDATE haul_task SET \"queueOrder\" = \(order) WHERE id = \(id)", logger: logger)
            result[id] = order
        }
        return result
    }
}
