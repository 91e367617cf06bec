import Foundation
import GRDB
import Haul
import Logging
import NIOCore
import PostgresNIO

/// Something statements run on: the pool (one statement) or one connection (a transaction).
protocol PostgresQueryable: Sendable {
    func rows(_ query: PostgresQuery, logger: Logger) async throws -> PostgresRowSequence
}

extension PostgresClient: PostgresQueryable {
    func rows(_ query: PostgresQuery, logger: Logger) async throws -> PostgresRowSequence {
        try await self.query(query, logger: logger)
    }
}

extension PostgresConnection: PostgresQueryable {
    func rows(_ query: PostgresQuery, logger: Logger) async throws -> PostgresRowSequence {
        try await self.query(query, logger: logger)
    }
}

/// `haul_task`'s columns and their types: how a ``TaskRecord``'s values (as GRDB encodes
/// them) become PostgreSQL values and back.
enum TaskTable {
    enum Kind { case uuid, text, bigint, boolean }

    /// Every column a record writes, in the order statements list them.
    static let columns: [(name: String, kind: Kind)] = [
        ("id", .uuid), ("session", .text), ("url", .text), ("finalURL", .text), ("directory", .text),
        ("fileName", .text), ("explicitName", .boolean), ("requestHeaders", .text), ("checksum", .text),
        ("overwrite", .boolean), ("state", .text), ("priority", .bigint), ("etag", .text),
        ("lastModified", .text), ("serverDate", .text), ("totalLength", .bigint), ("createdAt", .text),
        ("queuedAt", .text), ("updatedAt", .text), ("errorMessage", .text), ("queueOrder", .bigint),
        ("background", .boolean), ("connections", .bigint), ("minSplitSize", .bigint), ("rateLimit", .bigint),
        ("partPath", .text), ("partIdentity", .text), ("tls", .text), ("proxy", .text), ("credentials", .text),
        ("cookies", .text), ("nextTryAt", .text), ("allowsMetered", .boolean), ("checkNewer", .boolean),
        ("continuesExisting", .boolean), ("hooks", .text), ("sources", .text),
        ("maxConnectionsPerServer", .bigint), ("retryingSince", .text), ("followsMetalink", .boolean),
    ]
    static let kinds = Dictionary(uniqueKeysWithValues: columns.map { ($0.name, $0.kind) })

    /// `"a", "b", …`: the select list (fixed names, never input).
    static let selectList = columns.map { "\"\($0.name)\"" }.joined(separator: ", ")

    /// A row of `selectList` as a record, checked by the record's own reader.
    static func record(_ row: PostgresRow) throws -> TaskRecord {
        let cells = row.makeRandomAccess()
        var values: [String: (any DatabaseValueConvertible)?] = [:]
        for (index, column) in columns.enumerated() {
            let cell = cells[index]
            switch column.kind {
            case .uuid: values[column.name] = try cell.decode(UUID?.self)
            case .text: values[column.name] = try cell.decode(String?.self)
            case .bigint: values[column.name] = try cell.decode(Int64?.self)
            case .boolean: values[column.name] = try cell.decode(Bool?.self)
            }
        }
        return try TaskRecord(row: Row(values))
    }

    /// Appends a record's value of `column` to `binds`, typed as the column is.
    static func bind(_ value: DatabaseValue, of column: String, task: UUID, to binds: inout PostgresBindings) throws {
        guard let kind = kinds[column] else { preconditionFailure("no column \(column)") }
        if value.isNull {
            binds.appendNull()
            return
        }
        func unwritable() -> HaulError {
            HaulError(
                .store,
                "Task \(task) cannot be recorded in PostgreSQL: its \(column) is not of its column's type"
            )
        }
        switch kind {
        case .uuid:
            guard let uuid = UUID.fromDatabaseValue(value) else { throw unwritable() }
            binds.append(uuid)
        case .text:
            guard let text = String.fromDatabaseValue(value) else { throw unwritable() }
            binds.append(text)
        case .bigint:
            guard let number = Int64.fromDatabaseValue(value) else { throw unwritable() }
            binds.append(number)
        case .boolean:
            guard let flag = Bool.fromDatabaseValue(value) else { throw unwritable() }
            binds.append(flag)
        }
    }
}

extension PostgresStore {
    static func task(_ db: some PostgresQueryable, id: UUID, logger: Logger) async throws -> TaskRecord? {
        try await tasks(db, where: "id = $1", binds: { $0.append(id) }, logger: logger).first
    }

    /// The tasks a condition selects (its `$n` bound by `binds`), in queue order unless the
    /// condition orders them itself.
    static func tasks(
        _ db: some PostgresQueryable,
        where condition: String,
        ordered: Bool = true,
        binds fill: (inout PostgresBindings) throws -> Void,
        logger: Logger
    ) async throws -> [TaskRecord] {
        var binds = PostgresBindings()
        try fill(&binds)
        // Fixed text only: column names and the callers' conditions, never input.
        let sql =
            "SELECT \(TaskTable.selectList) FROM haul_task WHERE \(condition)"
            + (ordered ? " ORDER BY \"queueOrder\"" : "")
        var tasks: [TaskRecord] = []
        for try await row in try await db.rows(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger) {
            tasks.append(try TaskTable.record(row))
        }
        return tasks
    }

    /// A task's segments in order, checked (``SegmentRecord/checked(_:of:)``).
    static func segments(
        _ db: some PostgresQueryable,
        of task: TaskRecord,
        logger: Logger
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
                SegmentRecord(taskID: task.id, ordinal: int(ordinal), start: start, end: end, committed: committed)
            )
        }
        return try SegmentRecord.checked(segments, of: task)
    }

    static func pieces(_ db: some PostgresQueryable, of id: UUID, logger: Logger) async throws -> StoredPieces? {
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

    static func isPartPathTaken(
        _ db: some PostgresQueryable,
        _ path: String,
        byOtherThan id: UUID,
        logger: Logger
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
    static func claimPart(
        _ db: some PostgresQueryable,
        _ id: UUID,
        path: String,
        identity: String?,
        logger: Logger
    ) async throws -> Bool {
        if try await isPartPathTaken(db, path, byOtherThan: id, logger: logger) { return false }
        _ = try await db.rows(
            """
            UPDATE haul_task SET "partPath" = \(path), "partIdentity" = \(identity), "updatedAt" = \(StoreDate.now)
            WHERE id = \(id)
            """,
            logger: logger
        )
        return true
    }

    static func setState(
        _ db: some PostgresQueryable,
        _ id: UUID,
        _ state: TaskState,
        error: String?,
        code: HaulError.Code?,
        forgettingPart: Bool,
        logger: Logger
    ) async throws {
        let keepsStreak = state == .queued || state == .running || state == .failed
        _ = try await db.rows(
            """
            UPDATE haul_task SET state = \(state.rawValue), "errorMessage" = \(error),
                "errorCode" = \(code?.description), "nextTryAt" = NULL,
                "retryingSince" = CASE WHEN \(keepsStreak) THEN "retryingSince" ELSE NULL END,
                "updatedAt" = \(StoreDate.now),
                "partPath" = CASE WHEN \(forgettingPart) THEN NULL ELSE "partPath" END,
                "partIdentity" = CASE WHEN \(forgettingPart) THEN NULL ELSE "partIdentity" END,
                owner = CASE WHEN \(state == .running) THEN owner ELSE NULL END,
                lease_expires = CASE WHEN \(state == .running) THEN lease_expires ELSE NULL END
            WHERE id = \(id)
            """,
            logger: logger
        )
    }

    /// Records task `id` completed, its part file forgotten (it is the finished file now).
    static func setCompleted(_ db: some PostgresQueryable, _ id: UUID, logger: Logger) async throws {
        try await setState(db, id, .completed, error: nil, code: nil, forgettingPart: true, logger: logger)
    }

    /// Locks task `id`'s row for the rest of the transaction and throws
    /// ``HaulError/Code/invalidArgument`` if it is completed: a stop decided on an older
    /// reading of it comes too late.
    static func refuseIfCompleted(
        _ db: some PostgresQueryable,
        _ id: UUID,
        stopping state: TaskState,
        logger: Logger
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

    static func nextQueueOrder(_ db: some PostgresQueryable, logger: Logger) async throws -> Int64 {
        for try await order in try await db.rows("SELECT nextval('haul_queue_order')", logger: logger)
            .decode(Int64.self)
        {
            return order
        }
        throw HaulError(.store, "PostgreSQL gave no queue position")
    }

    /// Inserts a new task (every column) at the back of the queue, with its piece hashes;
    /// returns it with its queue position.
    static func insert(_ db: some PostgresQueryable, _ task: TaskRecord, logger: Logger) async throws -> TaskRecord {
        var task = task
        task.queueOrder = try await nextQueueOrder(db, logger: logger)
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
        if let pieces = task.pieces { try await insertPieces(db, taskID: task.id, pieces, logger: logger) }
        return task
    }

    /// Writes `columns` of a record (one group's), leaving the others as they are.
    static func update(
        _ db: some PostgresQueryable,
        _ task: TaskRecord,
        columns: [String],
        logger: Logger
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

    static func insertSegments(_ db: some PostgresQueryable, _ segments: [SegmentRecord], logger: Logger) async throws {
        for segment in segments {
            _ = try await db.rows(
                """
                INSERT INTO haul_segment ("taskID", ordinal, start, "end", committed)
                VALUES (\(segment.taskID), \(Int64(segment.ordinal)), \(segment.start), \(segment.end),
                    \(segment.committed))
                """,
                logger: logger
            )
        }
    }

    static func replaceSegments(
        _ db: some PostgresQueryable,
        of id: UUID,
        with segments: [SegmentRecord],
        logger: Logger
    ) async throws {
        _ = try await db.rows("DELETE FROM haul_segment WHERE \"taskID\" = \(id)", logger: logger)
        try await insertSegments(db, segments, logger: logger)
    }

    /// Records piece hashes for a task that has none yet.
    static func insertPieces(
        _ db: some PostgresQueryable,
        taskID: UUID,
        _ hashes: PieceHashes,
        logger: Logger
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
}
