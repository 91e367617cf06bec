import Foundation
import Haul
import Logging
import PostgresNIO
import Synchronization

/// This node's book of leases, and the fence on every write about their tasks: what fleet
/// mode adds to the PostgreSQL store (``PostgresStore`` runs each of its writes about a
/// task through ``fenced(_:_:final:_:)``).
///
/// A write about a task this node holds a lease on (a response, a checkpoint, a part file,
/// a state) first checks, in its own transaction and with the row locked until it commits,
/// that the lease still holds: this node the owner, the fence the one it was given, the
/// task running, the lease unexpired by the database's clock. If not, nothing is written
/// and the write fails with ``HaulError/Code/revoked``: another node may run the task
/// now, or someone paused or cancelled it. A write about a task it holds no lease on (a
/// user's pause of a task running elsewhere) is not fenced; it ends whatever lease the
/// task had, which the node running it then learns from its next write or heartbeat.
final class LeaseBook: Sendable {
    /// A lease in this node's book.
    struct Held: Sendable {
        var lease: FleetQueue.Lease
        /// Until when this node may take the lease as held without a renewal: the lease's
        /// length from the moment the acquisition or the last renewal was sent — never later
        /// than the time the database gives it, which counts from when it ran the query.
        /// On the book's timeline.
        var validUntil: Duration
        /// Found lost (by a heartbeat or a refused write): every write about its task is
        /// refused until the run here that held it has ended.
        var lost = false
    }

    private let client: PostgresClient
    private let fleet: FleetQueue
    private let logger: Logger
    /// How long a lease lasts unless renewed.
    let duration: Duration
    /// The time the book runs on (its clock: a test's, or the continuous one).
    let timeline: Timeline
    /// The leases this node took, by task. A lease found lost stays (``Held/lost``),
    /// refusing every write, until the run that held it has ended (``runEnded(_:)``).
    private let book = Mutex<[UUID: Held]>([:])
    /// How many downloads this node runs at once, as last given to ``acquire(wanted:maxRunning:perHost:)``,
    /// and whether the fleet has heard it (the other nodes weigh it in their share of the work).
    private let capacity = Mutex<(value: Int, told: Bool)>((0, false))
    /// The node drains: it takes no new lease.
    private let draining = Mutex(false)
    /// Since when this node has wanted work and been given none (nil: it was given some, or
    /// wanted none): after a lease's time it is overdue (``FleetAdmission/Room/overdue``).
    private let wantingSince = Mutex<Duration?>(nil)

    /// From now on this node takes no new lease (it drains).
    func stopTakingWork() { draining.withLock { $0 = true } }

    init(client: PostgresClient, fleet: FleetQueue, duration: Duration, timeline: Timeline, logger: Logger) {
        self.client = client
        self.fleet = fleet
        self.duration = duration
        self.timeline = timeline
        self.logger = logger
    }

    var node: String { fleet.node }

    /// Whether this node holds a lease on `id`, lost or not: its writes about it are fenced.
    func isBooked(_ id: UUID) -> Bool { book.withLock { $0[id] != nil } }

    /// Takes leases on up to `wanted` tasks of the fleet's queue within this node's limits
    /// (`maxRunning` downloads at once, `perHost` against one host) and the fleet's caps, and
    /// books them; returns their tasks (none when the answer came after the leases' time).
    /// With `wanted` 0 it only tells the fleet a changed `maxRunning` (nothing otherwise).
    func acquire(wanted: Int, maxRunning: Int, perHost: Int) async throws -> [UUID] {
        guard !draining.withLock({ $0 }) else { return [] }
        let sent = timeline.now
        let newCapacity = capacity.withLock { known in
            defer { known = (maxRunning, true) }
            return known != (maxRunning, true)
        }
        guard wanted > 0 || newCapacity else {
            wantingSince.withLock { $0 = nil }
            return []
        }
        let overdue = wantingSince.withLock { since in since.map { sent - $0 >= duration } ?? false }
        let taken: [FleetQueue.Lease]
        do {
            taken = try await fleet.acquire(
                wanted: wanted,
                capacity: maxRunning,
                perHost: perHost,
                duration: duration,
                excluding: book.withLock { Array($0.keys) },
                newCapacity: newCapacity,
                overdue: overdue
            )
        } catch {
            if newCapacity { capacity.withLock { $0.told = false } }
            throw error
        }
        wantingSince.withLock { since in
            since = wanted > 0 && taken.isEmpty ? since ?? sent : nil
        }
        // An answer that came after the leases' time (a database slow to answer, or the
        // admission lock held long) is not used: its leases are neither booked nor run, and
        // the database gives their tasks back when that time ends there.
        let validUntil = sent + duration
        guard validUntil > timeline.now else {
            logger.notice(
                "took leases too late to use them; their tasks go back to the queue when the leases run out",
                metadata: ["leases": "\(taken.count)", "node": "\(node)"]
            )
            return []
        }
        book.withLock { held in
            for lease in taken { held[lease.task] = Held(lease: lease, validUntil: validUntil) }
        }
        return taken.map(\.task)
    }

    /// Renews the leases booked when the beat begins; returns those found lost (kept in the
    /// book, marked, until their runs end).
    func heartbeat(bytesPerSecond: Double, rateLimit: Int64? = nil) async throws -> Set<UUID> {
        // Judged: the leases held when the beat began. One taken while it is under way is not
        // in its answer, and is not lost for that.
        let sent = timeline.now
        let beating = book.withLock { held in held.values.filter { !$0.lost }.map(\.lease) }
        let renewed = try await fleet.heartbeat(
            bytesPerSecond: bytesPerSecond,
            capacity: capacity.withLock { $0.value },
            rateLimit: rateLimit,
            duration: duration,
            renewing: beating
        )
        let still = Dictionary(renewed.map { ($0.task, $0) }, uniquingKeysWith: { first, _ in first })
        let lost = book.withLock { held in
            var lost: Set<UUID> = []
            for lease in beating {
                guard let entry = held[lease.task], entry.lease.fence == lease.fence, !entry.lost else { continue }
                if let renewal = still[lease.task] {
                    held[lease.task]?.lease = renewal
                    held[lease.task]?.validUntil = sent + duration
                } else {
                    // Kept, marked lost, until the run here has ended: forgetting it now
                    // would let that run's next writes through unfenced, and its "queued"
                    // overwrite a cancel made elsewhere.
                    held[lease.task]?.lost = true
                    lost.insert(lease.task)
                }
            }
            return lost
        }
        for id in lost {
            logger.notice(
                "lost the lease: the task was taken over, paused or cancelled elsewhere, or the lease ran out; its transfer here stops and writes nothing more",
                metadata: ["haul.task": "\(id)", "node": "\(node)"]
            )
        }
        return lost
    }

    /// Whether this node holds a lease on `id` not found lost.
    func holds(_ id: UUID) -> Bool {
        book.withLock { $0[id].map { !$0.lost } ?? false }
    }

    /// Marks lost, and returns, the leases whose time ran out here unrenewed (the database
    /// not answering): their runs stop before another node can take the tasks over.
    func runOut() -> Set<UUID> {
        let now = timeline.now
        let runOut = book.withLock { held in
            var runOut: Set<UUID> = []
            for (id, entry) in held where !entry.lost && entry.validUntil <= now {
                held[id]?.lost = true
                runOut.insert(id)
            }
            return runOut
        }
        if !runOut.isEmpty {
            logger.warning(
                "the database has not renewed this node's leases in time: their transfers here stop and write nothing more (another node may take the tasks over)",
                metadata: ["leases": "\(runOut.count)", "node": "\(node)"]
            )
        }
        return runOut
    }

    /// The run that held `id` ended here: a lost lease leaves the book.
    func runEnded(_ id: UUID) {
        book.withLock { held in
            if held[id]?.lost == true { held[id] = nil }
        }
    }

    /// Gives the lease on `id` back to the queue (its task waits there again).
    func release(_ id: UUID) async throws {
        guard let held = book.withLock({ $0.removeValue(forKey: id) }), !held.lost else { return }
        _ = try await fleet.release(held.lease)
    }

    /// Gives every lease back and leaves the fleet (the daemon stops).
    func leave() async throws {
        let released = try await fleet.leave()
        book.withLock { $0.removeAll() }
        if released > 0 {
            logger.info("gave the fleet back the leases still held", metadata: ["leases": "\(released)"])
        }
    }

    /// Forgets the lease of a task whose run ended here.
    func end(_ id: UUID) {
        _ = book.withLock { $0.removeValue(forKey: id) }
    }

    /// Checks, within `connection`'s transaction, that this node still holds the lease it
    /// took on task `id`, locking the row until the transaction ends; a task it holds no
    /// lease on passes. Throws ``HaulError/Code/revoked`` when the lease no longer holds,
    /// and marks it lost: every later write about the task is refused as well (a fence, once
    /// passed, never holds again) until the run here ends (``runEnded(_:)``).
    func checkFence(_ connection: PostgresConnection, _ id: UUID) async throws {
        guard let held = book.withLock({ $0[id] }) else { return }
        let lease = held.lease
        if held.lost { throw lost(id) }
        var holds = false
        for try await _ in try await connection.checkedQuery(
            """
            SELECT 1 FROM haul_task
            WHERE id = \(id) AND owner = \(node) AND fence = \(lease.fence) AND state = 'running'
                AND lease_expires > now()
            FOR UPDATE
            """,
            logger: logger
        ) {
            holds = true
        }
        guard !holds else { return }
        throw fenceFailed(id, fence: lease.fence)
    }

    /// Marks the lease `fence` on task `id` lost (a write found it no longer holds) and says so.
    private func fenceFailed(_ id: UUID, fence: Int64) -> HaulError {
        book.withLock { held in
            if held[id]?.lease.fence == fence { held[id]?.lost = true }
        }
        logger.warning(
            "lost the lease: the task was taken over, paused or cancelled elsewhere, or the lease ran out; nothing written",
            metadata: ["haul.task": "\(id)", "fence": "\(fence)", "node": "\(node)"]
        )
        return lost(id)
    }

    /// This node's lease on a task as a write that checks it itself sees it
    /// (``TaskWrite/query(id:fence:)``): the node, and the lease's token — nil when this node
    /// holds no lease on the task, and the write is not fenced.
    struct Fence: Sendable {
        let node: String
        let token: Int64?
    }

    /// Runs `body`, whose first statement writes task `id`'s row only while ``Fence`` holds
    /// and says whether it wrote (``TaskWrite``): alone, one round trip; or, with
    /// `transaction`, in a transaction whose other work (a file's placement) runs after that
    /// statement, under the row's lock, until the commit. A fence that did not hold is a
    /// lease lost, as in ``checkFence(_:_:)``; the rules of ``fenced(_:_:final:_:)`` apply.
    func fencedStatement<T: Sendable>(
        _ id: UUID,
        _ what: String,
        final: Bool = false,
        transaction: Bool = false,
        _ body: @escaping @Sendable (PostgresConnection, Fence) async throws -> (wrote: Bool, value: T)
    ) async throws -> T {
        try await guarded(id, final: final) { held in
            let fence = Fence(node: self.node, token: held?.lease.fence)
            let (wrote, value) = try await Postgres.run(what) {
                if transaction {
                    return try await self.client.withCheckedTransaction(logger: self.logger) {
                        try await body($0, fence)
                    }
                }
                return try await self.client.withConnection { try await body($0, fence) }
            }
            if !wrote, let token = fence.token { throw self.fenceFailed(id, fence: token) }
            return value
        }
    }

    /// The refusal of a write about task `id`, whose `lease` this node lost.
    private func lost(_ id: UUID) -> HaulError {
        HaulError(
            .revoked,
            "This node (\(node)) no longer holds task \(id.shown): its lease ran out or the task was changed elsewhere; the transfer here stopped and wrote nothing more",
            hint: "Nothing to do: the node holding the task now continues it from its last checkpoint"
        )
    }

    /// Runs `body` in a transaction fenced for task `id` (``checkFence(_:_:)`` first).
    /// - Parameter final: a write a run makes once it writes no more bytes (its file placed,
    ///   its end recorded): its verdict is waited for. Another node cannot take the task over
    ///   meanwhile — once the fence passed, the row stays locked until the commit — and a
    ///   write given up on might still commit, leaving the task completed or paused in the
    ///   store while this node thinks it lost the lease, and nobody told.
    func fenced<T: Sendable>(
        _ id: UUID,
        _ what: String,
        final: Bool = false,
        _ body: @escaping @Sendable (PostgresConnection) async throws -> T
    ) async throws -> T {
        try await guarded(id, final: final) { _ in
            try await Postgres.run(what) {
                try await self.client.withCheckedTransaction(logger: self.logger) { connection in
                    try await self.checkFence(connection, id)
                    return try await body(connection)
                }
            }
        }
    }

    /// Runs `write` about task `id` given this node's lease on it (nil: none), as
    /// ``fenced(_:_:final:_:)`` describes: refused at once when the lease is known lost; not
    /// waited for past the lease's time unless `final`.
    private func guarded<T: Sendable>(
        _ id: UUID,
        final: Bool,
        _ body: @escaping @Sendable (Held?) async throws -> T
    ) async throws -> T {
        // A lease known lost is refused at once, without waiting for a connection (the
        // database may be the reason it was lost).
        let held = book.withLock { $0[id] }
        if held?.lost == true { throw lost(id) }
        let write: @Sendable () async throws -> T = { try await body(held) }
        guard held != nil, !final else { return try await write() }
        // A write made while the run may still write bytes (a checkpoint, a response, a part
        // file) is not waited for past the lease's time (the database not answering: a request
        // waits up to a minute for a connection): by then the write would be refused anyway,
        // and the run must stop before another node takes the task over. The write is not cancelled
        // (it may be inside its transaction): it ends by itself, and a late success was a
        // write the fence allowed.
        let fence = held?.lease.fence
        let written = try await valueOrNil(
            of: write,
            unlessFirst: {
                // The lease's time, as renewed meanwhile by the heartbeat. Only its time: a
                // lease this node ended meanwhile (a completion, a release) times nothing,
                // and the write's own fence check judges a lease lost elsewhere.
                while !Task.isCancelled {
                    guard let now = self.book.withLock({ $0[id] }), now.lease.fence == fence else {
                        try? await self.timeline.sleep(for: .seconds(3600))
                        continue
                    }
                    if now.validUntil <= self.timeline.now { return }
                    try? await self.timeline.sleep(until: now.validUntil)
                }
            }
        )
        guard let written else {
            book.withLock { entries in
                if entries[id]?.lease.fence == fence { entries[id]?.lost = true }
            }
            throw lost(id)
        }
        return written
    }
}
