import Foundation
import GRDB

/// The SQL of the `task` and `segment` tables that ``Store`` composes into transactions:
/// each statement a function of an open database, cached on its connection where a run or a
/// listing repeats it. Every write names the columns its writer owns (the state group, the
/// response group, the part file), so writers of different groups never undo each other.
enum TaskTables {
    /// A task by its id, with a statement cached on the connection (every run reads its task).
    static func task(_ db: Database, id: UUID) throws -> TaskRecord? {
        try tasks(db.cachedStatement(sql: "SELECT \(taskColumns) FROM task WHERE id = ?"), [id]).next()
    }

    /// A task row's columns in the order of ``TaskRecord/storedColumns``, and where each is
    /// in a row selected with them: read by place, not by name (``TaskRowReader/positions``).
    private static let taskColumns = TaskRecord.storedColumns.map { "\"\($0.name)\"" }.joined(separator: ", ")
    private static let taskPositions = Dictionary(
        uniqueKeysWithValues: TaskRecord.storedColumns.enumerated().map { ($0.element.name, $0.offset) }
    )

    /// The tasks of `statement`, which selects ``taskColumns``, each read from its row in place
    /// (with `arguments`, or those the statement has).
    private static func tasks(
        _ statement: Statement,
        _ arguments: StatementArguments? = nil
    ) throws -> some Cursor<TaskRecord> {
        try Row.fetchCursor(statement, arguments: arguments).map { try TaskRecord(row: $0, positions: taskPositions) }
    }

    /// Tasks in any of `states` in queue order (``TaskStore/tasks(inStates:background:after:limit:)``).
    static func tasks(
        _ db: Database,
        inStates states: [TaskState],
        background: Bool?,
        after: Int64?,
        limit: Int?
    ) throws -> [TaskRecord] {
        // `+`: in queue order from its index, never by the index on (background, state) and a
        // sort of every task it names (a million: 0.4 s a page; see `listingConditions`).
        var request = TaskRecord.select(sql: taskColumns).filter(
            sql: "+state IN (\(states.map { _ in "?" }.joined(separator: ",")))",
            arguments: StatementArguments(states.map(\.rawValue))
        )
        if let background { request = request.filter(sql: "+background = ?", arguments: [background]) }
        if let after { request = request.filter(TaskRecord.Columns.queueOrder > after) }
        request = request.order(TaskRecord.Columns.queueOrder)
        if let limit { request = request.limit(limit) }
        let prepared = try request.asRequest(of: Row.self).makePreparedRequest(db, forSingleResult: false)
        return try Array(tasks(prepared.statement))
    }

    /// A task's segments in order, checked (``SegmentRecord/checked(_:of:)``).
    static func segments(_ db: Database, of task: TaskRecord) throws -> [SegmentRecord] {
        try SegmentRecord.checked(
            SegmentRecord.fetchAll(
                db.cachedStatement(sql: "SELECT * FROM segment WHERE taskID = ? ORDER BY ordinal"),
                arguments: [task.id]
            ),
            of: task
        )
    }

    /// The task that is not cancelled for a URL into a directory, with the name the user
    /// fixed (`fileName`) or with none fixed (nil).
    static func findTask(_ db: Database, url: URL, directory: String, fileName: String?) throws -> TaskRecord? {
        // Cached statements (adding thousands of tasks runs one each), whose literal
        // 'cancelled' lets SQLite use the partial index task_one_per_destination. The row's
        // id first: a new download (most of a large add) finds none, and reading no row of
        // every column costs a record cursor all the same.
        let statement: Statement
        let arguments: StatementArguments
        if let fileName {
            statement = try db.cachedStatement(
                sql: """
                    SELECT rowid FROM task WHERE url = ? AND directory = ? AND state != 'cancelled' AND fileName = ?
                    AND explicitName ORDER BY createdAt DESC LIMIT 1
                    """
            )
            arguments = [url.absoluteString, directory, fileName]
        } else {
            statement = try db.cachedStatement(
                sql: """
                    SELECT rowid FROM task WHERE url = ? AND directory = ? AND state != 'cancelled' AND NOT explicitName
                    ORDER BY createdAt DESC LIMIT 1
                    """
            )
            arguments = [url.absoluteString, directory]
        }
        guard let rowID = try Int64.fetchOne(statement, arguments: arguments) else { return nil }
        return try tasks(db.cachedStatement(sql: "SELECT \(taskColumns) FROM task WHERE rowid = ?"), [rowID]).next()
    }

    /// Writes a re-add's request group (``TaskReAdd``) over task `id`'s.
    static func applyReAdd(_ db: Database, _ reAdd: TaskReAdd, to id: UUID) throws {
        try db.cachedStatement(
            sql: """
                UPDATE task SET background = ?, session = ?, requestHeaders = ?, checksum = ?, overwrite = ?,
                    connections = ?, minSplitSize = ?, rateLimit = ?, tls = ?, proxy = ?,
                    credentials = ?, cookies = ?, allowsMetered = ?, checkNewer = ?,
                    continuesExisting = ?, hooks = ?, updatedAt = ?
                WHERE id = ?
                """
        ).execute(
            arguments: [
                reAdd.background, reAdd.session, try TaskRecord.text(of: reAdd.requestHeaders),
                reAdd.checksum?.description, reAdd.overwrite,
                reAdd.connections, reAdd.minSplitSize, reAdd.rateLimit, try TaskRecord.text(of: reAdd.tls),
                try TaskRecord.text(of: reAdd.proxy),
                reAdd.credentials == .none ? nil : try TaskRecord.json(reAdd.credentials),
                reAdd.cookies == .standard ? nil : try TaskRecord.json(reAdd.cookies),
                reAdd.allowsMetered, reAdd.checkNewer, reAdd.continuesExisting,
                reAdd.hooks == .none ? nil : try TaskRecord.json(reAdd.hooks),
                StoreDate.now, id,
            ]
        )
    }

    static func nextQueueOrder(_ db: Database) throws -> Int64 {
        try Int64.fetchOne(db, sql: "SELECT COALESCE(MAX(queueOrder), 0) + 1 FROM task") ?? 1
    }

    static func isPartPathTaken(_ db: Database, _ path: String, byOtherThan id: UUID) throws -> Bool {
        try Bool.fetchOne(
            db.cachedStatement(sql: "SELECT EXISTS (SELECT 1 FROM task WHERE partPath = ? AND id != ?)"),
            arguments: [path, id]
        ) ?? false
    }

    /// ``claimPart(_:path:identity:)`` within a transaction already open.
    static func claimPart(_ db: Database, _ id: UUID, path: String, identity: String?) throws -> Bool {
        if try TaskTables.isPartPathTaken(db, path, byOtherThan: id) { return false }
        try db.cachedStatement(
            sql: "UPDATE task SET partPath = ?, partIdentity = ?, updatedAt = ? WHERE id = ?"
        ).execute(
            arguments: [path, identity, StoreDate.now, id]
        )
        return true
    }

    static func setState(
        _ db: Database,
        _ id: UUID,
        _ state: TaskState,
        error: String?,
        code: HaulError.Code?,
        forgettingPart: Bool
    ) throws {
        // The part file's columns are named only when they change: a column in the SET list
        // has its index entry (task_on_partPath) rewritten even when its value stays.
        try db.cachedStatement(sql: forgettingPart ? setStateForgettingPartSQL : setStateSQL).execute(
            arguments: stateArguments(state, error: error, code: code) + [StoreDate.now, id]
        )
    }

    /// What a change of state sets, as an UPDATE's assignments (``stateArguments(_:error:code:)``
    /// are their values): the time of a next try goes; the start of a streak of tries stays
    /// only while the task may still be retried.
    private static let stateAssignments = """
        state = ?, errorMessage = ?, errorCode = ?, nextTryAt = NULL,
            retryingSince = CASE WHEN ? THEN retryingSince ELSE NULL END
        """

    private static func stateArguments(_ state: TaskState, error: String?, code: HaulError.Code?) -> StatementArguments
    {
        let keepsStreak = state == .queued || state == .running || state == .failed
        return [state.rawValue, error, code?.description, keepsStreak]
    }

    private static let setStateSQL = "UPDATE task SET \(stateAssignments), updatedAt = ? WHERE id = ?"
    private static let setStateForgettingPartSQL =
        "UPDATE task SET \(stateAssignments), updatedAt = ?, partPath = NULL, partIdentity = NULL WHERE id = ?"

    /// Records what a response said of the file (``Store/saveResponse(_:segments:claimingPart:recordingRunning:)``),
    /// with the part file `part` and the state "running" when given: one UPDATE of the task's
    /// row, which SQLite writes whole however few of its columns change.
    static func recordResponse(
        _ db: Database,
        _ task: TaskRecord,
        sources: String?,
        part: (path: String, identity: String?)?,
        running: Bool
    ) throws {
        var arguments: StatementArguments = [
            task.finalURL?.absoluteString, task.fileName, task.etag, task.lastModified, task.serverDate,
            task.totalLength, sources, StoreDate.now,
        ]
        if let part { arguments += [part.path, part.identity] }
        if running { arguments += stateArguments(.running, error: nil, code: nil) }
        arguments += [task.id]
        try db.cachedStatement(sql: recordResponseSQL[(part == nil ? 0 : 1) + (running ? 2 : 0)])
            .execute(arguments: arguments)
    }

    /// ``recordResponse(_:_:sources:part:running:)``'s statements: without and with the part
    /// file's columns (bit 0), without and with the state's (bit 1).
    private static let recordResponseSQL: [String] = (0..<4).map { variant in
        "UPDATE task SET finalURL = ?, fileName = ?, etag = ?, lastModified = ?, serverDate = ?,"
            + " totalLength = ?, sources = ?, updatedAt = ?"
            + (variant & 1 != 0 ? ", partPath = ?, partIdentity = ?" : "")
            + (variant & 2 != 0 ? ", \(stateAssignments)" : "")
            + " WHERE id = ?"
    }

    /// Every task with its committed bytes, in queue order, in one query: only the columns
    /// a listing shows, decoded by position (the query a `haul list` of thousands runs).
    /// Of `page`, only its tasks: those after its `after` task in queue order, read from the
    /// queue order's index, at most its limit.
    /// - Throws: ``HaulError/Code/notFound`` when the page's `after` task no longer exists.
    static func infos(
        _ db: Database,
        ids: [UUID]? = nil,
        background: Bool?,
        session: String?,
        page: TaskPage? = nil
    ) throws -> [DownloadInfo] {
        // The committed bytes per task by a subquery, not a join and a grouping: a page is
        // then read in queue order from its index and stops at its limit.
        var sql = """
            SELECT task.id, task.url, task.directory, task.fileName, task.state, task.priority,
                task.totalLength, task.errorMessage,
                (SELECT COALESCE(SUM(segment.committed - segment.start), 0) FROM segment WHERE segment.taskID = task.id),
                task.session, task.rateLimit, task.connections, task.nextTryAt, task.errorCode, task.sources
            FROM task
            """
        var (conditions, arguments) = listingConditions(ids: ids, background: background, session: session)
        if let idPrefix = page?.idPrefix {
            conditions.append("task.id BETWEEN ? AND ?")
            arguments += [idPrefix.lowest, idPrefix.highest]
        }
        if let states = page?.stateNames {
            conditions.append("+task.state IN (\(states.map { _ in "?" }.joined(separator: ",")))")
            arguments += StatementArguments(states)
        }
        if let after = page?.after {
            guard
                let order = try Int64.fetchOne(db, sql: "SELECT queueOrder FROM task WHERE id = ?", arguments: [after])
            else { throw TaskPage.gone(after) }
            conditions.append(page?.fromEnd == true ? "task.queueOrder < ?" : "task.queueOrder > ?")
            arguments += [order]
        }
        if !conditions.isEmpty { sql += " WHERE " + conditions.joined(separator: " AND ") }
        sql += page?.fromEnd == true ? " ORDER BY task.queueOrder DESC" : " ORDER BY task.queueOrder"
        if let page {
            sql += " LIMIT ? OFFSET ?"
            arguments += [page.limit, page.offset]
        }
        // Compiled once per connection, as every frequent statement is: compiling this one
        // cost 0.5 M instructions, more than reading a task, at each `info` of one task. Not
        // for a long list of ids, whose every length would be another statement kept.
        let statement =
            (ids?.count ?? 0) <= 16 ? try db.cachedStatement(sql: sql) : try db.makeStatement(sql: sql)
        var infos: [DownloadInfo] = []
        let rows = try Row.fetchCursor(statement, arguments: arguments)
        while let row = try rows.next() {
            infos.append(
                try DownloadInfo(
                    storedID: row[0],
                    url: row[1],
                    directory: row[2],
                    fileName: row[3],
                    state: row[4],
                    priority: row[5],
                    totalLength: row[6],
                    errorMessage: row[7],
                    committed: row[8],
                    session: row[9],
                    rateLimit: row[10],
                    connections: row[11],
                    nextTryAt: StoreDate.date(row[12] as DatabaseValue),
                    errorCode: row[13],
                    sources: row[14]
                )
            )
        }
        return infos
    }

    /// A listing's conditions on ids, the daemon's tasks and a session, with their arguments.
    private static func listingConditions(
        ids: [UUID]?,
        background: Bool?,
        session: String?
    ) -> ([String], StatementArguments) {
        var conditions: [String] = []
        var arguments = StatementArguments()
        if let ids {
            conditions.append("task.id IN (\(ids.map { _ in "?" }.joined(separator: ",")))")
            arguments += StatementArguments(ids)
        }
        if let background {
            // `+`: not by the index on (background, state), which names nearly every task,
            // and a sort of them all; a listing reads the queue order's index and stops at
            // its limit (0.27 s → under a millisecond for a page of a million tasks). A
            // window of a few states (aria2's) is read the same way: at worst, when no task
            // is in them, the whole index.
            conditions.append("+task.background = ?")
            arguments += [background]
        }
        if let session {
            conditions.append("task.session = ?")
            arguments += [session]
        }
        return (conditions, arguments)
    }

    /// Inserts a new task's row with a statement cached on the connection: an add of
    /// thousands runs it once each, without GRDB's generic record path (a container of
    /// every column built and a statement made for each row: a seventh of an add's CPU).
    static func insert(_ db: Database, _ task: TaskRecord) throws {
        try db.cachedStatement(sql: insertTaskSQL).execute(arguments: StatementArguments(try task.storedValues()))
    }

    private static let insertTaskSQL =
        "INSERT INTO task (\(TaskRecord.storedColumns.map(\.name).joined(separator: ", ")))"
        + " VALUES (\(TaskRecord.storedColumns.map { _ in "?" }.joined(separator: ", ")))"

    /// Inserts segments, with a statement cached on the connection.
    static func insert(_ db: Database, _ segments: [SegmentRecord]) throws {
        let statement = try db.cachedStatement(
            sql: "INSERT INTO segment (taskID, ordinal, start, \"end\", committed) VALUES (?, ?, ?, ?, ?)"
        )
        for segment in segments {
            try statement.execute(
                arguments: [segment.taskID, segment.ordinal, segment.start, segment.end, segment.committed]
            )
        }
    }

    /// Replaces a task's segments. When they are numbered 0, 1, 2… (as a plan numbers them),
    /// the rows already there are updated in place and only the others deleted or inserted:
    /// a download's response and its completion each rewrite its segments, and deleting and
    /// inserting a row also rewrites the key's index and looks up the task row (the foreign
    /// key), where an update of the offsets changes the row alone.
    static func replaceSegments(_ db: Database, of id: UUID, with segments: [SegmentRecord]) throws {
        guard segments.indices.elementsEqual(segments.lazy.map(\.ordinal)), segments.allSatisfy({ $0.taskID == id })
        else {
            try db.cachedStatement(sql: "DELETE FROM segment WHERE taskID = ?").execute(arguments: [id])
            try insert(db, segments)
            return
        }
        let update = try db.cachedStatement(
            sql: "UPDATE segment SET start = ?, \"end\" = ?, committed = ? WHERE taskID = ? AND ordinal = ?"
        )
        var missing: [SegmentRecord] = []
        for segment in segments {
            try update.execute(arguments: [segment.start, segment.end, segment.committed, id, segment.ordinal])
            if db.changesCount == 0 { missing.append(segment) }
        }
        try db.cachedStatement(sql: "DELETE FROM segment WHERE taskID = ? AND ordinal >= ?")
            .execute(arguments: [id, segments.count])
        try insert(db, missing)
    }

    /// Gives `ids` the places in the queue they hold between them, in the order given
    /// (``Store/reorder(_:)``).
    static func reorder(_ db: Database, _ ids: [UUID]) throws -> [UUID: Int64] {
        var orders: [Int64] = []
        for id in ids {
            guard
                let order = try Int64.fetchOne(db, sql: "SELECT queueOrder FROM task WHERE id = ?", arguments: [id])
            else { throw HaulError(.notFound, "No task \(id.shown)") }
            orders.append(order)
        }
        var result: [UUID: Int64] = [:]
        for (id, order) in zip(ids, orders.sorted()) {
            try db.execute(sql: "UPDATE task SET queueOrder = ? WHERE id = ?", arguments: [order, id])
            result[id] = order
        }
        return result
    }
}
