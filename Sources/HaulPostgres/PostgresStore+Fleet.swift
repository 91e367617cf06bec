import Foundation
import Haul
import HaulDaemon
import HaulWire
import HaulWireMapping
import Logging
import PostgresNIO
import Synchronization

/// Fleet mode: the leases this node holds, and the fence on every write about their tasks.
///
/// A write about a task this node holds a lease on (a response, a checkpoint, a part file,
/// a state) first checks, in its own transaction and with the row locked until it commits,
/// that the lease still holds: this node the owner, the fence the one it was given, the
/// task running, the lease unexpired by the database's clock. If not, nothing is written
/// and the write fails with ``HaulError/Code/revoked``: another node may run the task
/// now, or someone paused or cancelled it. A write about a task it holds no lease on (a
/// user's pause of a task running elsewhere) is not fenced; it ends whatever lease the
/// task had, which the node running it then learns from its next write or heartbeat.
extension PostgresStore {
    /// A lease in this node's book.
    struct HeldLease: Sendable {
        var lease: FleetQueue.Lease
        /// Until when this node may take the lease as held without a renewal: the lease's
        /// length from the moment the acquisition or the last renewal was sent — never later
        /// than the time the database gives it, which counts from when it ran the query.
        /// On the store's timeline.
        var validUntil: Duration
        /// Found lost (by a heartbeat or a refused write): every write about its task is
        /// refused until the run here that held it has ended.
        var lost = false
    }

    package var node: String { fleet.node }

    package func acquireLeases(wanted: Int, maxRunning: Int, perHost: Int) async throws -> [UUID] {
        let sent = timeline.now
        let taken = try await fleet.acquire(
            wanted: wanted,
            maxRunning: maxRunning,
            perHost: perHost,
            duration: leaseDuration,
            excluding: leases.withLock { Array($0.keys) }
        )
        // An answer that came after the leases' time (a database slow to answer, or the
        // admission lock held long) is not used: its leases are neither booked nor run, and
        // the database gives their tasks back when that time ends there.
        let validUntil = sent + leaseDuration
        guard validUntil > timeline.now else {
            logger.notice(
                "took leases too late to use them; their tasks go back to the queue when the leases run out",
                metadata: ["leases": "\(taken.count)", "node": "\(node)"]
            )
            return []
        }
        leases.withLock { held in
            for lease in taken { held[lease.task] = HeldLease(lease: lease, validUntil: validUntil) }
        }
        return taken.map(\.task)
    }

    package func heartbeat(bytesPerSecond: Double) async throws -> Set<UUID> {
        // Judged: the leases held when the beat began. One taken while it is under way is not
        // in its answer, and is not lost for that.
        let sent = timeline.now
        let beating = leases.withLock { held in held.values.filter { !$0.lost }.map(\.lease) }
        let renewed = try await fleet.heartbeat(
            bytesPerSecond: bytesPerSecond,
            duration: leaseDuration,
            renewing: beating
        )
        let still = Dictionary(renewed.map { ($0.task, $0) }, uniquingKeysWith: { first, _ in first })
        let lost = leases.withLock { held in
            var lost: Set<UUID> = []
            for lease in beating {
                guard let entry = held[lease.task], entry.lease.fence == lease.fence, !entry.lost else { continue }
                if let renewal = still[lease.task] {
                    held[lease.task]?.lease = renewal
                    held[lease.task]?.validUntil = sent + leaseDuration
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

    package func holdsLease(_ id: UUID) -> Bool {
        leases.withLock { $0[id].map { !$0.lost } ?? false }
    }

    package func leasesRunOut() -> Set<UUID> {
        let now = timeline.now
        let runOut = leases.withLock { held in
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

    package func sendBackOverLimits(maxRunning: Int, perHost: Int) async throws -> [UUID] {
        try await fleet.sendBackOverLimits(maxRunning: maxRunning, perHost: perHost)
    }

    package func fleetSignals() -> AsyncStream<FleetSignal> {
        signals.subscribe(client: client, logger: logger)
    }

    package func abandonLease(_ id: UUID) {
        endLease(id)
    }

    package func runEnded(_ id: UUID) {
        leases.withLock { held in
            if held[id]?.lost == true { held[id] = nil }
        }
    }

    package func releaseLease(_ id: UUID) async throws {
        guard let held = leases.withLock({ $0.removeValue(forKey: id) }), !held.lost else { return }
        _ = try await fleet.release(held.lease)
    }

    package func leaveFleet() async throws {
        let released = try await fleet.leave()
        leases.withLock { $0.removeAll() }
        if released > 0 {
            logger.info("gave the fleet back the leases still held", metadata: ["leases": "\(released)"])
        }
    }

    /// Forgets the lease of a task whose run ended here.
    func endLease(_ id: UUID) {
        _ = leases.withLock { $0.removeValue(forKey: id) }
    }

    /// Checks, within `connection`'s transaction, that this node still holds the lease it
    /// took on task `id`, locking the row until the transaction ends; a task it holds no
    /// lease on passes. Throws ``HaulError/Code/revoked`` when the lease no longer holds,
    /// and marks it lost: every later write about the task is refused as well (a fence, once
    /// passed, never holds again) until the run here ends (``runEnded(_:)``).
    func checkFence(_ connection: PostgresConnection, _ id: UUID) async throws {
        guard let held = leases.withLock({ $0[id] }) else { return }
        let lease = held.lease
        if held.lost { throw leaseLost(id) }
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
        leases.withLock { held in
            if held[id]?.lease.fence == lease.fence { held[id]?.lost = true }
        }
        logger.warning(
            "lost the lease: the task was taken over, paused or cancelled elsewhere, or the lease ran out; nothing written",
            metadata: ["haul.task": "\(id)", "fence": "\(lease.fence)", "node": "\(node)"]
        )
        throw leaseLost(id)
    }

    /// The refusal of a write about task `id`, whose `lease` this node lost.
    private func leaseLost(_ id: UUID) -> HaulError {
        HaulError(
            .revoked,
            "This node (\(node)) no longer holds task \(id): its lease ran out or the task was changed elsewhere; the transfer here stopped and wrote nothing more",
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
        // A lease known lost is refused at once, without waiting for a connection (the
        // database may be the reason it was lost).
        let held = leases.withLock { $0[id] }
        if held?.lost == true { throw leaseLost(id) }
        let write: @Sendable () async throws -> T = {
            try await Postgres.run(what) {
                try await self.client.withCheckedTransaction(logger: self.logger) { connection in
                    try await self.checkFence(connection, id)
                    return try await body(connection)
                }
            }
        }
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
                    guard let now = self.leases.withLock({ $0[id] }), now.lease.fence == fence else {
                        try? await self.timeline.sleep(for: .seconds(3600))
                        continue
                    }
                    if now.validUntil <= self.timeline.now { return }
                    try? await self.timeline.sleep(until: now.validUntil)
                }
            }
        )
        guard let written else {
            leases.withLock { entries in
                if entries[id]?.lease.fence == fence { entries[id]?.lost = true }
            }
            throw leaseLost(id)
        }
        return written
    }
}

extension PostgresStore: FleetView {
    package var storeDescription: String { location.map { "\($0)" } ?? "PostgreSQL" }

    package func fleetNodes() async throws -> [API.Status.Fleet.Node] {
        try await fleet.report.nodes()
    }
}
