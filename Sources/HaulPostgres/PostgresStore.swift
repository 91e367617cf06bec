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
    /// The statements of Haul's tables (``PostgresTables``).
    let tables: PostgresTables
    /// Runs the client's connection pool while the store is open (nil when the caller runs it).
    private let runner: Task<Void, Never>?
    /// This node's place in the fleet's queue.
    package let fleet: FleetQueue
    /// This node's leases and the fence on the writes about their tasks (``LeaseBook``).
    let leases: LeaseBook
    /// Where the database is (nil when the caller gave a client).
    let location: PostgresLocation?
    /// What the nodes tell each other at once (LISTEN/NOTIFY).
    let signals = FleetSignals()

    /// The advisory lock key of adds.
    static let addLock: Int64 = 0x4841_554c_0003

    /// The default time a lease lasts unless renewed.
    public static let defaultLeaseDuration: Duration = .seconds(15)

    /// A store on a client the caller runs (`client.run()`), migrated.
    package convenience init(
        client: PostgresClient,
        node: String = FleetQueue.defaultNode,
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
        self.location = location
        self.client = client
        self.logger = logger
        tables = PostgresTables(logger: logger)
        self.runner = runner
        let fleet = try FleetQueue(client: client, node: node, logger: logger)
        self.fleet = fleet
        leases = LeaseBook(client: client, fleet: fleet, duration: leaseDuration, timeline: timeline, logger: logger)
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
        node: String = FleetQueue.defaultNode,
        leaseDuration: Duration = PostgresStore.defaultLeaseDuration,
        logger: Logger
    ) async throws -> PostgresStore {
        try FleetQueue.validateNodeName(node)
        guard leaseDuration >= .milliseconds(100), leaseDuration <= .seconds(3_600) else {
            throw HaulError(.invalidArgument, "A lease must last from 0.1 s to an hour")
        }
        let client = PostgresClient(
            configuration: location.configuration(node: node, leaseDuration: leaseDuration),
            backgroundLogger: logger
        )
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

    /// Stops the connection pool (when this store runs it): nothing is written after this.
    package func closeDatabase() async throws {
        signals.close()
        runner?.cancel()
    }

    // MARK: Reading

    package func task(id: UUID) async throws -> TaskRecord? {
        try await Postgres.run("read a task") {
            try await self.tables.task(client, id: id)
        }
    }

    package func tasks(ids: [UUID]) async throws -> [TaskRecord] {
        try await Postgres.run("read tasks") {
            try await self.tables.tasks(client, where: "id = ANY($1::uuid[])", binds: { $0.append(ids) })
        }
    }

    package func taskWithSegments(_ id: UUID) async throws -> (TaskRecord, [SegmentRecord])? {
        try await Postgres.run("read a task") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                guard let task = try await self.tables.task(connection, id: id) else { return nil }
                return (task, try await self.tables.segments(connection, of: task))
            }
        }
    }

    package func taskForRun(_ id: UUID) async throws -> (TaskRecord, [SegmentRecord])? {
        try await Postgres.run("read a task") {
            try await TaskTable.forRun(client, id: id, logger: logger)
        }
    }

    package func tasks(
        inStates states: [TaskState],
        background: Bool?,
        after: Int64?,
        limit: Int?
    ) async throws -> [TaskRecord] {
        try await Postgres.run("read tasks") {
            try await self.tables.tasks(client, inStates: states, background: background, after: after, limit: limit)
        }
    }

    package func infos(ids: [UUID]?, background: Bool?, session: String?) async throws -> [DownloadInfo] {
        try await Postgres.run("list tasks") {
            try await TaskTable.infos(client, ids: ids, background: background, session: session, logger: logger)
        }
    }

    package func infos(page: TaskPage, background: Bool?, session: String?) async throws -> [DownloadInfo] {
        try await Postgres.run("list tasks") {
            try await TaskTable.infos(client, background: background, session: session, page: page, logger: logger)
        }
    }

    package func pieces(of id: UUID) async throws -> StoredPieces? {
        try await Postgres.run("read a task's pieces") {
            try await self.tables.pieces(client, of: id)
        }
    }

    package func isPartPathTaken(_ path: String, byOtherThan id: UUID) async throws -> Bool {
        try await Postgres.run("read a task's part file") {
            try await self.tables.isPartPathTaken(client, path, byOtherThan: id)
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
                let results = try await AddBatch(tables: self.tables, logger: self.logger)
                    .findOrInsert(connection, items, accept: accept)
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
                try await self.tables.adopt(connection, task, segments: segments)
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
        var task = task
        task.updatedAt = Date()
        var write = TaskWrite()
        if recordingRunning { write.set(state: .running) }
        if let part { write.claimPart(path: part.path, identity: part.identity, of: task.id) }
        try write.set(columns: TaskTable.responseColumns, of: task)
        write.replaceSegments(with: segments)
        let (id, statement) = (task.id, write)
        return try await leases.fencedStatement(id, "record a server's response") { connection, fence in
            let claimed = try await statement.run(on: connection, id: id, fence: fence, logger: self.logger)
            return (claimed != nil, claimed ?? false)
        }
    }

    package func checkpoint(
        _ id: UUID,
        segments: [SegmentRecord],
        sources: [DownloadSource]?,
        verifiedPieces: [UInt8]?,
        completing: Bool
    ) async throws {
        let write = try TaskWrite.checkpoint(
            CheckpointRecord(segments: segments, sources: sources, verifiedPieces: verifiedPieces),
            completing: completing
        )
        // One statement, unless the verified pieces (another table) are written with it.
        try await leases.fencedStatement(id, "record a checkpoint", transaction: verifiedPieces != nil) {
            connection,
            fence in
            guard try await write.run(on: connection, id: id, fence: fence, logger: self.logger) != nil else {
                return (false, ())
            }
            if let verifiedPieces { try await self.tables.setVerifiedPieces(connection, id, verifiedPieces) }
            return (true, ())
        }
        if completing { leases.end(id) }
    }

    package func setPart(_ id: UUID, path: String?, identity: String?) async throws {
        try await leases.fenced(id, "record a task's part file") { connection in
            try await self.tables.setPart(connection, id, path: path, identity: identity)
        }
    }

    package func claimPart(_ id: UUID, path: String, identity: String?) async throws -> Bool {
        try await leases.fenced(id, "record a task's part file") { connection in
            try await self.tables.claimPart(connection, id, path: path, identity: identity)
        }
    }

    package func setRateLimit(_ bytesPerSecond: Int64?, for ids: [UUID]) async throws {
        try await execute("record a rate limit") {
            "UPDATE haul_task SET \"rateLimit\" = \(bytesPerSecond) WHERE id = ANY(\(ids)::uuid[])"
        }
    }

    package func setSources(_ id: UUID, url: URL, sources: [DownloadSource]) async throws {
        let sources = sources.isEmpty ? nil : JSONB(try TaskRecord.json(sources))
        try await execute("record a task's sources") {
            "UPDATE haul_task SET url = \(url.absoluteString), sources = \(sources), \"updatedAt\" = \(Date()) WHERE id = \(id)"
        }
    }

    package func setState(
        _ id: UUID,
        _ state: TaskState,
        error: String?,
        code: HaulError.Code?,
        forgettingPart: Bool
    ) async throws {
        let running = leases.isBooked(id)
        try await leases.fenced(id, "record a task's state", final: true) { connection in
            if !running, [.paused, .cancelled, .failed].contains(state) {
                // A user's stop, from a node not running the task: never over a completion
                // another node recorded since this one looked.
                try await self.tables.refuseIfCompleted(connection, id, stopping: state)
            }
            if !running {
                try await FleetSignals.send(.task(id), on: connection, logger: self.logger)
                if state == .queued { try await FleetSignals.send(.queue, on: connection, logger: self.logger) }
            }
            try await self.tables.setState(
                connection,
                id,
                state,
                error: error,
                code: code,
                forgettingPart: forgettingPart
            )
        }
        if state != .running { leases.end(id) }
    }

    package func setRetrying(_ id: UUID, error: String, nextTryAt: Date, since: Date) async throws {
        try await leases.fenced(id, "record a task's next try", final: true) { connection in
            try await self.tables.setRetrying(connection, id, error: error, nextTryAt: nextTryAt, since: since)
        }
        leases.end(id)
    }

    package func delete(_ id: UUID) async throws {
        try await Postgres.run("remove a task") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                _ = try await connection.checkedQuery("DELETE FROM haul_task WHERE id = \(id)", logger: self.logger)
                try await FleetSignals.send(.task(id), on: connection, logger: self.logger)
            }
        }
    }

    package func requeue(_ id: UUID, state: TaskState, keepingPlace: Bool) async throws -> Int64 {
        let running = leases.isBooked(id)
        let order = try await leases.fenced(id, "queue a task again", final: true) { connection in
            if !running { try await FleetSignals.send(.task(id), on: connection, logger: self.logger) }
            if state == .queued { try await FleetSignals.send(.queue, on: connection, logger: self.logger) }
            return try await self.tables.requeue(connection, id, state: state, keepingPlace: keepingPlace)
        }
        leases.end(id)
        return order
    }

    package func reorder(_ ids: [UUID]) async throws -> [UUID: Int64] {
        try await Postgres.run("reorder the queue") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                try await self.tables.reorder(connection, ids)
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

    var settings: PostgresSettings { PostgresSettings(client: client, logger: logger, node: fleet.node) }

    package func numericSettings() async throws -> [(name: String, value: Int64?)] { try await settings.numeric() }
    package func saveNumericSettings(_ values: [(name: String, value: Int64)]) async throws {
        try await settings.saveNumeric(values)
    }

    package func textSetting(_ name: String) async throws -> String? { try await settings.text(name) }
    package func saveTextSetting(_ name: String, _ value: String) async throws {
        try await settings.saveText(name, value)
    }

    /// Runs one statement.
    private func execute(_ what: String, _ query: () throws -> PostgresQuery) async throws {
        let query = try query()
        try await Postgres.run(what) { _ = try await client.query(query, logger: logger) }
    }
}
