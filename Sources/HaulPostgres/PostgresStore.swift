import Foundation
import GRDB
import Haul
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// Haul's tasks in PostgreSQL: the ``TaskStore`` of fleet mode, where several daemons
/// share one queue (the rules are those of ``Store``, its SQLite sibling; only the engine
/// differs).
///
/// The tables mirror SQLite's (`haul_task` has the columns of `task`, by the same names), so
/// a task is one ``TaskRecord`` whichever engine holds it: a row is read into GRDB's `Row`
/// and decoded by the record's own checks, and written from the record's own encoding.
/// Each intent is one transaction, touching only the columns of its group. Adds take an
/// advisory lock, so adds racing on several nodes never create two tasks for one
/// destination (a unique index backs that, as in SQLite); queue positions come from a
/// sequence.
public final class PostgresStore: TaskStore {
    let client: PostgresClient
    let logger: Logger
    /// Runs the client's connection pool while the store is open (nil when the caller runs it).
    private let runner: Task<Void, Never>?
    /// This node's place in the fleet's queue.
    package let fleet: FleetQueue
    package let leaseDuration: Duration
    /// The time this node's book of leases runs on (its clock: a test's, or the continuous one).
    let timeline: Timeline
    /// Where the database is (nil when the caller gave a client).
    let location: PostgresLocation?
    /// The leases this node took, by task: the writes about these tasks are fenced. A lease
    /// found lost stays here (``HeldLease/lost``), refusing every write, until the run that
    /// held it has ended (``runEnded(_:)``).
    let leases = Mutex<[UUID: HeldLease]>([:])
    /// What the nodes tell each other at once (LISTEN/NOTIFY).
    let signals = FleetSignals()

    /// The advisory lock key of adds.
    static let addLock: Int64 = 0x4841_554c_0003

    /// The default time a lease lasts unless renewed.
    public static let defaultLeaseDuration: Duration = .seconds(15)

    /// A store on a client the caller runs (`client.run()`), migrated.
    package convenience init(
        client: PostgresClient,
        node: String = PostgresStore.defaultNode,
        leaseDuration: Duration = PostgresStore.defaultLeaseDuration,
        clock: any Clock<Duration> = ContinuousClock(),
        logger: Logger
    ) async throws {
        try self.init(
            client: client,
            node: node,
            leaseDuration: leaseDuration,
            timeline: Timeline(clock),
            location: nil,
            logger: logger,
            runner: nil
        )
        try await PostgresSchema.migrate(client, logger: logger)
    }

    private init(
        client: PostgresClient,
        node: String,
        leaseDuration: Duration,
        timeline: Timeline = Timeline(),
        location: PostgresLocation?,
        logger: Logger,
        runner: Task<Void, Never>?
    ) throws {
        self.timeline = timeline
        self.location = location
        self.client = client
        self.logger = logger
        self.runner = runner
        self.fleet = try FleetQueue(client: client, node: node, logger: logger)
        self.leaseDuration = leaseDuration
    }

    /// Connects to the database `location` names (a pool of connections from postgres-nio),
    /// and creates or upgrades Haul's tables in it (under an advisory lock: several daemons
    /// may start at once).
    /// - Parameters:
    ///   - node: this daemon's name in the fleet (``FleetQueue/validateNodeName(_:)``).
    ///   - leaseDuration: how long a lease lasts unless the heartbeat renews it.
    /// - Throws: ``HaulError/Code/store`` when the database cannot be reached or migrated;
    ///   ``HaulError/Code/invalidArgument`` for a node name that is not one.
    public static func connect(
        to location: PostgresLocation,
        node: String = PostgresStore.defaultNode,
        leaseDuration: Duration = PostgresStore.defaultLeaseDuration,
        logger: Logger
    ) async throws -> PostgresStore {
        try FleetQueue.validateNodeName(node)
        guard leaseDuration >= .milliseconds(100), leaseDuration <= .seconds(3_600) else {
            throw HaulError(.invalidArgument, "A lease must last from 0.1 s to an hour")
        }
        var configuration = location.configuration
        // A node stalled inside a transaction (SIGSTOP, a pause of its machine) must not hold
        // a task's row locked past its lease: the server ends such a transaction then, so
        // another node can take the task over (its fenced writes would fail anyway).
        let milliseconds =
            leaseDuration.components.seconds * 1000 + leaseDuration.components.attoseconds / 1_000_000_000_000_000
        configuration.options.additionalStartupParameters.append(
            ("idle_in_transaction_session_timeout", "\(max(100, milliseconds))")
        )
        // Which node each server connection serves, for `pg_stat_activity` (and the tests).
        configuration.options.additionalStartupParameters.append(("application_name", "haul \(node)"))
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        // Started at once, so the client runs before the first query leases a connection.
        let runner = Task.immediate { await client.run() }
        let store = try PostgresStore(
            client: client,
            node: node,
            leaseDuration: leaseDuration,
            location: location,
            logger: logger,
            runner: runner
        )
        do {
            try await PostgresSchema.migrate(client, logger: logger)
        } catch var error as HaulError {
            runner.cancel()
            error.message = error.message.replacingOccurrences(
                of: "in PostgreSQL",
                with: "in PostgreSQL at \(location)"
            )
            throw error
        }
        return store
    }

    /// The host name, as a node name when none is given (else "haul").
    public static var defaultNode: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "haul" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return DownloadRequest.isPlainName(name, maxLength: 64) ? name : "haul"
    }

    /// Stops the connection pool (when this store runs it): nothing is written after this.
    package func closeDatabase() async throws {
        signals.close()
        runner?.cancel()
    }

    // MARK: Reading

    package func task(id: UUID) async throws -> TaskRecord? {
        try await Postgres.run("read a task") {
            try await Self.task(client, id: id, logger: logger)
        }
    }

    package func taskWithSegments(_ id: UUID) async throws -> (TaskRecord, [SegmentRecord])? {
        try await Postgres.run("read a task") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                guard let task = try await Self.task(connection, id: id, logger: self.logger) else { return nil }
                return (task, try await Self.segments(connection, of: task, logger: self.logger))
            }
        }
    }

    package func taskForRun(_ id: UUID) async throws -> (TaskRecord, [SegmentRecord])? {
        try await Postgres.run("read a task") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                guard var task = try await Self.task(connection, id: id, logger: self.logger) else { return nil }
                task.storedPieces = .some(try await Self.pieces(connection, of: id, logger: self.logger))
                return (task, try await Self.segments(connection, of: task, logger: self.logger))
            }
        }
    }

    package func tasks(inStates states: [TaskState], background: Bool?) async throws -> [TaskRecord] {
        let names = states.map(\.rawValue)
        return try await Postgres.run("read tasks") {
            try await Self.tasks(
                client,
                where: "state = ANY($1::text[]) AND ($2::boolean IS NULL OR background = $2)",
                binds: {
                    $0.append(names)
                    $0.append(background)
                },
                logger: logger
            )
        }
    }

    package func infos(ids: [UUID]?, background: Bool?, session: String?) async throws -> [DownloadInfo] {
        try await Postgres.run("list tasks") {
            var infos: [DownloadInfo] = []
            let rows = try await client.query(
                """
                SELECT t.id, t.url, t.directory, t."fileName", t.state, t.priority, t."totalLength",
                    t."errorMessage",
                    -- A completed file is whole: its length, also in the moment between placing
                    -- it (recorded completed) and the completing checkpoint's segments.
                    CASE WHEN t.state = 'completed' AND t."totalLength" IS NOT NULL THEN t."totalLength"
                        ELSE COALESCE(SUM(s.committed - s.start), 0)::bigint END,
                    t.session,
                    t."rateLimit", t.connections, t."nextTryAt", t."errorCode", t.sources,
                    CASE WHEN t.state = 'running' THEN t.owner END
                FROM haul_task t LEFT JOIN haul_segment s ON s."taskID" = t.id
                WHERE (\(ids)::uuid[] IS NULL OR t.id = ANY(\(ids)::uuid[]))
                    AND (\(background)::boolean IS NULL OR t.background = \(background)::boolean)
                    AND (\(session)::text IS NULL OR t.session = \(session)::text)
                GROUP BY t.id ORDER BY t."queueOrder"
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
                        priority: Self.int(try cells[5].decode(Int64.self)),
                        totalLength: try cells[6].decode(Int64?.self),
                        errorMessage: try cells[7].decode(String?.self),
                        committed: try cells[8].decode(Int64.self),
                        session: try cells[9].decode(String.self),
                        rateLimit: try cells[10].decode(Int64?.self),
                        connections: try cells[11].decode(Int64?.self).map(Self.int),
                        nextTryAt: try cells[12].decode(String?.self).flatMap(StoreDate.date),
                        errorCode: try cells[13].decode(String?.self),
                        sources: try cells[14].decode(String?.self),
                        node: try cells[15].decode(String?.self)
                    )
                )
            }
            return infos
        }
    }

    package func pieces(of id: UUID) async throws -> StoredPieces? {
        try await Postgres.run("read a task's pieces") {
            try await Self.pieces(client, of: id, logger: logger)
        }
    }

    package func isPartPathTaken(_ path: String, byOtherThan id: UUID) async throws -> Bool {
        try await Postgres.run("read a task's part file") {
            try await Self.isPartPathTaken(client, path, byOtherThan: id, logger: logger)
        }
    }

    // MARK: Writing

    package func findOrInsert(
        _ items: [(new: TaskRecord, reAdd: TaskReAdd)],
        accept: @escaping @Sendable (TaskRecord) throws -> Void
    ) async throws -> [(record: TaskRecord, segments: [SegmentRecord], isNew: Bool)] {
        try await Postgres.run("record a download") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                _ = try await connection.checkedQuery(
                    "SELECT pg_advisory_xact_lock(\(Self.addLock))",
                    logger: self.logger
                )
                var results: [(record: TaskRecord, segments: [SegmentRecord], isNew: Bool)] = []
                for (new, reAdd) in items {
                    let fileName = new.explicitName ? new.fileName : nil
                    let found = try await Self.tasks(
                        connection,
                        where: """
                            url = $1 AND directory = $2 AND state <> 'cancelled'
                                AND (CASE WHEN $3::text IS NULL THEN NOT "explicitName"
                                    ELSE "explicitName" AND "fileName" = $3::text END)
                            ORDER BY "createdAt" DESC LIMIT 1
                            """,
                        ordered: false,
                        binds: {
                            $0.append(new.url.absoluteString)
                            $0.append(new.directory)
                            $0.append(fileName)
                        },
                        logger: self.logger
                    )
                    if var existing = found.first {
                        try accept(existing)
                        reAdd.apply(to: &existing)
                        existing.updatedAt = Date()
                        try await Self.update(connection, existing, columns: Self.requestColumns, logger: self.logger)
                        if let pieces = new.pieces {
                            try await Self.insertPieces(connection, taskID: existing.id, pieces, logger: self.logger)
                        }
                        let segments = try await Self.segments(connection, of: existing, logger: self.logger)
                        results.append((existing, segments, false))
                    } else {
                        let task = try await Self.insert(connection, new, logger: self.logger)
                        let segment = SegmentRecord(taskID: task.id, ordinal: 0, start: 0, committed: 0)
                        try await Self.insertSegments(connection, [segment], logger: self.logger)
                        results.append((task, [segment], true))
                    }
                }
                if results.contains(where: \.isNew) {
                    try await FleetSignals.send(.queue, on: connection, logger: self.logger)
                }
                return results
            }
        }
    }

    package func adopt(_ task: TaskRecord, segments: [SegmentRecord]) async throws {
        try await Postgres.run("record a download from resume data") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                var task = task
                task.updatedAt = Date()
                if try await Self.task(connection, id: task.id, logger: self.logger) != nil {
                    try await Self.update(
                        connection,
                        task,
                        columns: TaskTable.columns.map(\.name).filter { $0 != "id" },
                        logger: self.logger
                    )
                    if let pieces = task.pieces {
                        try await Self.insertPieces(connection, taskID: task.id, pieces, logger: self.logger)
                    }
                } else {
                    task = try await Self.insert(connection, task, logger: self.logger)
                }
                try await Self.replaceSegments(connection, of: task.id, with: segments, logger: self.logger)
            }
        }
    }

    @discardableResult
    package func saveResponse(
        _ task: TaskRecord,
        segments: [SegmentRecord],
        claimingPart part: (path: String, identity: String?)?,
        recordingRunning: Bool
    ) async throws -> Bool {
        try await fenced(task.id, "record a server's response") { connection in
            if recordingRunning {
                try await Self.setState(
                    connection,
                    task.id,
                    .running,
                    error: nil,
                    code: nil,
                    forgettingPart: false,
                    logger: self.logger
                )
            }
            var claimed = false
            if let part {
                claimed = try await Self.claimPart(
                    connection,
                    task.id,
                    path: part.path,
                    identity: part.identity,
                    logger: self.logger
                )
            }
            var task = task
            task.updatedAt = Date()
            try await Self.update(connection, task, columns: Self.responseColumns, logger: self.logger)
            try await Self.replaceSegments(connection, of: task.id, with: segments, logger: self.logger)
            return claimed
        }
    }

    package func checkpoint(
        _ id: UUID,
        segments: [SegmentRecord],
        sources: [DownloadSource]?,
        verifiedPieces: [UInt8]?,
        completing: Bool
    ) async throws {
        let sourcesText = try sources.map { try TaskRecord.json($0) }
        try await fenced(id, "record a checkpoint") { connection in
            if completing { try await Self.setCompleted(connection, id, logger: self.logger) }
            try await Self.replaceSegments(connection, of: id, with: segments, logger: self.logger)
            if let verifiedPieces {
                _ = try await connection.checkedQuery(
                    "UPDATE haul_piece SET verified = \(ByteBuffer(bytes: verifiedPieces)) WHERE \"taskID\" = \(id)",
                    logger: self.logger
                )
            }
            if let sourcesText {
                _ = try await connection.checkedQuery(
                    "UPDATE haul_task SET sources = \(sourcesText), \"updatedAt\" = \(StoreDate.now) WHERE id = \(id)",
                    logger: self.logger
                )
            } else {
                _ = try await connection.checkedQuery(
                    "UPDATE haul_task SET \"updatedAt\" = \(StoreDate.now) WHERE id = \(id)",
                    logger: self.logger
                )
            }
        }
        if completing { endLease(id) }
    }

    package func setPart(_ id: UUID, path: String?, identity: String?) async throws {
        try await fenced(id, "record a task's part file") { connection in
            _ = try await connection.checkedQuery(
                """
                UPDATE haul_task SET "partPath" = \(path), "partIdentity" = \(identity), "updatedAt" = \(StoreDate.now)
                WHERE id = \(id)
                """,
                logger: self.logger
            )
        }
    }

    package func claimPart(_ id: UUID, path: String, identity: String?) async throws -> Bool {
        try await fenced(id, "record a task's part file") { connection in
            try await Self.claimPart(connection, id, path: path, identity: identity, logger: self.logger)
        }
    }

    package func setRateLimit(_ bytesPerSecond: Int64?, for ids: [UUID]) async throws {
        try await execute("record a rate limit") {
            "UPDATE haul_task SET \"rateLimit\" = \(bytesPerSecond) WHERE id = ANY(\(ids)::uuid[])"
        }
    }

    package func setState(
        _ id: UUID,
        _ state: TaskState,
        error: String?,
        code: HaulError.Code?,
        forgettingPart: Bool
    ) async throws {
        let running = leases.withLock { $0[id] != nil }
        try await fenced(id, "record a task's state", final: true) { connection in
            if !running, [.paused, .cancelled, .failed].contains(state) {
                // A user's stop, from a node not running the task: never over a completion
                // another node recorded since this one looked.
                try await Self.refuseIfCompleted(connection, id, stopping: state, logger: self.logger)
            }
            if !running {
                try await FleetSignals.send(.task(id), on: connection, logger: self.logger)
                if state == .queued { try await FleetSignals.send(.queue, on: connection, logger: self.logger) }
            }
            try await Self.setState(
                connection,
                id,
                state,
                error: error,
                code: code,
                forgettingPart: forgettingPart,
                logger: self.logger
            )
        }
        if state != .running { endLease(id) }
    }

    package func placeFinished(_ id: UUID, _ place: @escaping @Sendable () async throws -> Void) async throws {
        guard leases.withLock({ $0[id] != nil }) else {
            try await place()
            return
        }
        try await fenced(id, "record a finished download", final: true) { connection in
            // The row is locked under this node's lease until the commit: a pause or cancel
            // from another node waits, then finds the task completed.
            try await place()
            try await Self.setCompleted(connection, id, logger: self.logger)
        }
        // Completed toward every node: the full completion that follows is this node's to
        // record, with no lease left to check.
        endLease(id)
    }

    package func setRetrying(_ id: UUID, error: String, nextTryAt: Date, since: Date) async throws {
        try await fenced(id, "record a task's next try", final: true) { connection in
            _ = try await connection.checkedQuery(
                """
                UPDATE haul_task SET state = 'retrying', "errorMessage" = \(error),
                    "nextTryAt" = \(StoreDate.text(nextTryAt)), "retryingSince" = \(StoreDate.text(since)),
                    "updatedAt" = \(StoreDate.now), owner = NULL, lease_expires = NULL
                WHERE id = \(id)
                """,
                logger: self.logger
            )
        }
        endLease(id)
    }

    package func delete(_ id: UUID) async throws {
        try await Postgres.run("remove a task") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                _ = try await connection.checkedQuery("DELETE FROM haul_task WHERE id = \(id)", logger: self.logger)
                try await FleetSignals.send(.task(id), on: connection, logger: self.logger)
            }
        }
    }

    package func requeue(_ id: UUID, state: TaskState) async throws -> Int64 {
        let running = leases.withLock { $0[id] != nil }
        let order = try await fenced(id, "queue a task again", final: true) { connection in
            if !running { try await FleetSignals.send(.task(id), on: connection, logger: self.logger) }
            if state == .queued { try await FleetSignals.send(.queue, on: connection, logger: self.logger) }
            let order = try await Self.nextQueueOrder(connection, logger: self.logger)
            _ = try await connection.checkedQuery(
                """
                UPDATE haul_task SET state = \(state.rawValue), "queueOrder" = \(order),
                    "queuedAt" = \(StoreDate.now), "errorMessage" = NULL, "errorCode" = NULL,
                    "nextTryAt" = NULL, "retryingSince" = NULL, "updatedAt" = \(StoreDate.now),
                    owner = NULL, lease_expires = NULL
                WHERE id = \(id)
                """,
                logger: self.logger
            )
            return order
        }
        endLease(id)
        return order
    }

    package func reorder(_ ids: [UUID]) async throws -> [UUID: Int64] {
        try await Postgres.run("reorder the queue") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                var orders: [UUID: Int64] = [:]
                for try await (id, order) in try await connection.checkedQuery(
                    "SELECT id, \"queueOrder\" FROM haul_task WHERE id = ANY(\(ids)::uuid[]) ORDER BY id FOR UPDATE",
                    logger: self.logger
                ).decode((UUID, Int64).self) {
                    orders[id] = order
                }
                if let missing = ids.first(where: { orders[$0] == nil }) {
                    throw HaulError(.notFound, "No task \(missing)")
                }
                var result: [UUID: Int64] = [:]
                for (id, order) in zip(ids, ids.compactMap { orders[$0] }.sorted()) {
                    _ = try await connection.checkedQuery(
                        "UPDATE haul_task SET \"queueOrder\" = \(order) WHERE id = \(id)",
                        logger: self.logger
                    )
                    result[id] = order
                }
                return result
            }
        }
    }

    package func setPriority(_ id: UUID, _ priority: Int) async throws {
        try await execute("record a task's priority") {
            "UPDATE haul_task SET priority = \(Int64(priority)) WHERE id = \(id)"
        }
    }

    package func clearVerifiedPieces(of id: UUID) async throws {
        try await execute("forget a task's verified pieces") {
            "UPDATE haul_piece SET verified = NULL WHERE \"taskID\" = \(id)"
        }
    }

    // MARK: Settings

    package func numericSettings() async throws -> [(name: String, value: Int64?)] {
        try await Postgres.run("read the settings") {
            var settings: [(name: String, value: Int64?)] = []
            for try await (name, value) in try await client.query(
                "SELECT name, value FROM haul_setting",
                logger: logger
            ).decode((String, Int64?).self) {
                settings.append((name, value))
            }
            return settings
        }
    }

    package func saveNumericSettings(_ values: [(name: String, value: Int64)]) async throws {
        try await Postgres.run("save the settings") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                for (name, value) in values {
                    _ = try await connection.checkedQuery(
                        """
                        INSERT INTO haul_setting (name, value) VALUES (\(name), \(value))
                        ON CONFLICT (name) DO UPDATE SET value = excluded.value
                        """,
                        logger: self.logger
                    )
                }
                try await FleetSignals.send(.settings, on: connection, logger: self.logger)
            }
        }
    }

    package func textSetting(_ name: String) async throws -> String? {
        try await Postgres.run("read the settings") {
            var found: String?
            for try await value in try await client.query(
                "SELECT value FROM haul_text_setting WHERE name = \(name)",
                logger: logger
            ).decode(String.self) {
                found = value
            }
            return found
        }
    }

    package func saveTextSetting(_ name: String, _ value: String) async throws {
        try await Postgres.run("save the settings") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                _ = try await connection.checkedQuery(
                    """
                    INSERT INTO haul_text_setting (name, value) VALUES (\(name), \(value))
                    ON CONFLICT (name) DO UPDATE SET value = excluded.value
                    """,
                    logger: self.logger
                )
                try await FleetSignals.send(.settings, on: connection, logger: self.logger)
            }
        }
    }

    // MARK: Support

    /// Runs one statement.
    private func execute(_ what: String, _ query: () throws -> PostgresQuery) async throws {
        let query = try query()
        try await Postgres.run(what) { _ = try await client.query(query, logger: logger) }
    }

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

    static func int(_ value: Int64) -> Int { Int(clamping: value) }
}
