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
/// them for SQLite) become PostgreSQL's own — `timestamptz` for times, `jsonb` for the
/// structured columns — and back.
enum TaskTable {
    enum Kind { case uuid, text, bigint, boolean, timestamp, json }

    /// Every column a record writes, in the order statements list them.
    static let columns: [(name: String, kind: Kind)] = [
        ("id", .uuid), ("session", .text), ("url", .text), ("finalURL", .text), ("directory", .text),
        ("fileName", .text), ("explicitName", .boolean), ("requestHeaders", .json), ("checksum", .text),
        ("overwrite", .boolean), ("state", .text), ("priority", .bigint), ("etag", .text),
        ("lastModified", .text), ("serverDate", .text), ("totalLength", .bigint), ("createdAt", .timestamp),
        ("queuedAt", .timestamp), ("updatedAt", .timestamp), ("errorMessage", .text), ("queueOrder", .bigint),
        ("background", .boolean), ("connections", .bigint), ("minSplitSize", .bigint), ("rateLimit", .bigint),
        ("partPath", .text), ("partIdentity", .text), ("tls", .json), ("proxy", .json), ("credentials", .json),
        ("cookies", .json), ("nextTryAt", .timestamp), ("allowsMetered", .boolean), ("checkNewer", .boolean),
        ("continuesExisting", .boolean), ("hooks", .json), ("sources", .json),
        ("maxConnectionsPerServer", .bigint), ("retryingSince", .timestamp), ("followsMetalink", .boolean),
    ]
    static let kinds = Dictionary(uniqueKeysWithValues: columns.map { ($0.name, $0.kind) })
    /// The request group's columns (a re-add writes these and no others).
    static let requestColumns = [
        "background", "session", "requestHeaders", "checksum", "overwrite", "connections", "minSplitSize",
        "rateLimit", "tls", "proxy", "credentials", "cookies", "allowsMetered", "checkNewer",
        "continuesExisting", "hooks", "updatedAt",
    ]
    /// The response group's columns (what a transfer learnt from a server).
    static let responseColumns = [
        "finalURL", "fileName", "etag", "lastModified", "serverDate", "totalLength", "sources", "updatedAt",
    ]

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
            case .text, .json: values[column.name] = try cell.decode(String?.self)
            case .timestamp: values[column.name] = try cell.decode(Date?.self).map(StoreDate.text)
            case .bigint: values[column.name] = try cell.decode(Int64?.self)
            case .boolean: values[column.name] = try cell.decode(Bool?.self)
            }
        }
        return try TaskRecord(row: Row(values))
    }

    /// What a run of task `id` reads first — the task, its piece hashes and its segments
    /// (checked) — in one statement, so one snapshot: nil when there is no such task.
    static func forRun(
        _ db: some PostgresQueryable,
        id: UUID,
        logger: Logger
    ) async throws -> (TaskRecord, [SegmentRecord])? {
        guard let (task, segments) = try await forRun(db, ids: [id], logger: logger)[id] else { return nil }
        return (task, try segments.get())
    }

    /// What the runs of tasks `ids` read first (``forRun(_:id:logger:)``), in one statement:
    /// each task that exists, with its segments checked — or why they cannot be used, which
    /// only that task's run is told. A task whose row cannot be read fails the whole read.
    static func forRun(
        _ db: some PostgresQueryable,
        ids: [UUID],
        logger: Logger
    ) async throws -> [UUID: (TaskRecord, Result<[SegmentRecord], any Error>)] {
        let sql = """
            SELECT \(columns.map { "t.\"\($0.name)\"" }.joined(separator: ", ")),
                p.algorithm, p.length, p.digests, p.verified, s.ordinals, s.starts, s.open, s.ends, s.committed
            FROM haul_task t
            LEFT JOIN haul_piece p ON p."taskID" = t.id
            LEFT JOIN LATERAL (
                SELECT array_agg(ordinal ORDER BY ordinal) AS ordinals, array_agg(start ORDER BY ordinal) AS starts,
                    array_agg("end" IS NULL ORDER BY ordinal) AS open,
                    array_agg(COALESCE("end", 0) ORDER BY ordinal) AS ends,
                    array_agg(committed ORDER BY ordinal) AS committed
                FROM haul_segment WHERE "taskID" = t.id
            ) s ON true
            WHERE t.id = ANY($1::uuid[])
            """
        var binds = PostgresBindings()
        binds.append(ids)
        var runs: [UUID: (TaskRecord, Result<[SegmentRecord], any Error>)] = [:]
        for try await row in try await db.rows(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger) {
            var task = try record(row)
            let cells = row.makeRandomAccess()
            let at = columns.count
            if let algorithm = try cells[at].decode(String?.self) {
                task.storedPieces = .some(
                    try StoredPieces(
                        task: task.id,
                        algorithm: algorithm,
                        length: try cells[at + 1].decode(Int64?.self),
                        digests: try cells[at + 2].decode(ByteBuffer?.self).map { Array(buffer: $0) },
                        verified: try cells[at + 3].decode(ByteBuffer?.self).map { Array(buffer: $0) }
                    )
                )
            } else {
                task.storedPieces = .some(nil)
            }
            let segments = Result { try Self.segments(in: cells, at: at + 4, of: task) }
            runs[task.id] = (task, segments)
        }
        return runs
    }

    /// The segments of `task` that ``forRun(_:ids:logger:)`` aggregates into five arrays from
    /// column `at` on, checked.
    private static func segments(
        in cells: PostgresRandomAccessRow,
        at: Int,
        of task: TaskRecord
    ) throws
        -> [SegmentRecord]
    {
        let ordinals = try cells[at].decode([Int64]?.self) ?? []
        let starts = try cells[at + 1].decode([Int64]?.self) ?? []
        let open = try cells[at + 2].decode([Bool]?.self) ?? []
        let ends = try cells[at + 3].decode([Int64]?.self) ?? []
        let committed = try cells[at + 4].decode([Int64]?.self) ?? []
        guard [starts.count, open.count, ends.count, committed.count].allSatisfy({ $0 == ordinals.count }) else {
            throw HaulError(
                .store,
                "Task \(task.id.shown) in PostgreSQL cannot be read: its segments are not whole",
                hint: "Remove it with 'haul remove \(task.id.shown)'"
            )
        }
        let segments = ordinals.indices.map { index in
            SegmentRecord(
                taskID: task.id,
                ordinal: int(ordinals[index]),
                start: starts[index],
                end: open[index] ? nil : ends[index],
                committed: committed[index]
            )
        }
        return try SegmentRecord.checked(segments, of: task)
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
        case .timestamp:
            guard let date = StoreDate.date(value) else { throw unwritable() }
            binds.append(date)
        case .json:
            guard let text = String.fromDatabaseValue(value) else { throw unwritable() }
            binds.append(JSONB(text))
        }
    }

    /// Every task with its committed bytes, in queue order, in one query: only the columns a
    /// listing shows (the query a `haul list` of thousands runs), and the node running each.
    /// Of `page`, only its tasks, read from the queue order's index up to its limit.
    /// - Throws: ``HaulError/Code/notFound`` when the page's `after` task no longer exists.
    static func infos(
        _ db: some PostgresQueryable,
        ids: [UUID]? = nil,
        background: Bool?,
        session: String?,
        page: TaskPage? = nil,
        logger: Logger
    ) async throws -> [DownloadInfo] {
        var after: Int64?
        if let id = page?.after {
            let query: PostgresQuery = "SELECT \"queueOrder\" FROM haul_task WHERE id = \(id)"
            for try await order in try await db.rows(query, logger: logger).decode(Int64.self) { after = order }
            guard after != nil else { throw TaskPage.gone(id) }
        }
        let limit = page.map { Int64($0.limit) }
        let offset = Int64(page?.offset ?? 0)
        let states = page?.stateNames
        let fromEnd = page?.fromEnd == true
        let idPrefix = page?.idPrefix
        var infos: [DownloadInfo] = []
        // The committed bytes per task by a subquery, not a join and a grouping: a page is
        // then read in queue order from its index and stops at its limit.
        let rows = try await db.rows(
            """
            SELECT t.id, t.url, t.directory, t."fileName", t.state, t.priority, t."totalLength",
                t."errorMessage",
                -- A completed file is whole: its length, also in the moment between placing
                -- it (recorded completed) and the completing checkpoint's segments.
                CASE WHEN t.state = 'completed' AND t."totalLength" IS NOT NULL THEN t."totalLength"
                    ELSE (SELECT COALESCE(SUM(s.committed - s.start), 0) FROM haul_segment s WHERE s."taskID" = t.id)::bigint
                END,
                t.session,
                t."rateLimit", t.connections, t."nextTryAt", t."errorCode", t.sources,
                CASE WHEN t.state = 'running' THEN t.owner END
            FROM haul_task t
            WHERE (\(ids)::uuid[] IS NULL OR t.id = ANY(\(ids)::uuid[]))
                AND (\(background)::boolean IS NULL OR t.background = \(background)::boolean)
                AND (\(session)::text IS NULL OR t.session = \(session)::text)
                AND (\(states)::text[] IS NULL OR t.state = ANY(\(states)::text[]))
                AND (\(idPrefix?.lowest)::uuid IS NULL OR t.id BETWEEN \(idPrefix?.lowest)::uuid AND \(idPrefix?.highest)::uuid)
                AND (\(after)::bigint IS NULL OR t."queueOrder" \(unescaped: fromEnd ? "<" : ">") \(after)::bigint)
            ORDER BY t."queueOrder" \(unescaped: fromEnd ? "DESC" : "ASC") LIMIT \(limit)::bigint OFFSET \(offset)
            """,
            logger: logger
        )
        for try await row in rows {
            let cells = row.makeRandomAccess()
            let id = try cells[0].decode(UUID.self)
            infos.append(
                try DownloadInfo(
                    storedID: id,
                    url: try cells[1].decode(String.self),
                    directory: try cells[2].decode(String.self),
                    fileName: try cells[3].decode(String?.self),
                    state: try cells[4].decode(String.self),
                    priority: int(try cells[5].decode(Int64.self)),
                    totalLength: try cells[6].decode(Int64?.self),
                    errorMessage: try cells[7].decode(String?.self),
                    committed: try cells[8].decode(Int64.self),
                    session: try cells[9].decode(String.self),
                    rateLimit: try cells[10].decode(Int64?.self),
                    connections: try cells[11].decode(Int64?.self).map(Self.int),
                    nextTryAt: try cells[12].decode(Date?.self),
                    errorCode: try cells[13].decode(String?.self),
                    sources: try cells[14].decode(String?.self),
                    node: try cells[15].decode(String?.self)
                )
            )
        }
        return infos
    }

    static func int(_ value: Int64) -> Int { Int(clamping: value) }
}

/// A JSON document bound for a `jsonb` column (a record's JSON text, as SQLite keeps it).
/// PostgreSQL checks it is JSON; reading one back, `String` takes `jsonb`.
struct JSONB: PostgresNonThrowingEncodable {
    let text: String

    init(_ text: String) { self.text = text }

    static var psqlType: PostgresDataType { .jsonb }
    static var psqlFormat: PostgresFormat { .binary }

    func encode<JSONEncoder: PostgresJSONEncoder>(
        into byteBuffer: inout ByteBuffer,
        context: PostgresEncodingContext<JSONEncoder>
    ) {
        byteBuffer.writeInteger(UInt8(1))  // jsonb's binary format: a version byte, then the text.
        byteBuffer.writeString(text)
    }
}
