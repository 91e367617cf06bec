import Foundation
import Haul
import HaulDaemon
import HaulWire
import HaulWireMapping

/// The fleet's queue as the core sees it (``SharedQueue``): a claim is a lease of this
/// node's ``LeaseBook``, a revoked claim a lease lost; the heartbeat, the watch on leases the
/// database has not renewed in time, and the nodes' signals run here, in
/// ``maintainClaims(speed:notice:)``.
extension PostgresStore: SharedQueue {
    /// How often the watch looks for leases that ran out unrenewed: a tenth of their length.
    var watchInterval: Duration { leases.duration / 10 }

    package var claimDuration: Duration { leases.duration }

    package func claim(wanted: Int, maxRunning: Int, perHost: Int) async throws -> [UUID] {
        try await leases.acquire(wanted: wanted, maxRunning: maxRunning, perHost: perHost)
    }

    package func holdsClaim(_ id: UUID) -> Bool { leases.holds(id) }

    /// The claimed tasks as their runs read them first, in one statement instead of one a run.
    package func tasksForRun(ids: [UUID]) async throws -> [(task: TaskRecord, segments: [SegmentRecord]?)] {
        try await Postgres.run("read tasks") {
            try await TaskTable.forRun(client, ids: ids, logger: logger).values.map { task, segments in
                (task, try? segments.get())
            }
        }
    }

    package func abandonClaim(_ id: UUID) { leases.end(id) }

    package func giveBack(_ id: UUID) async throws { try await leases.release(id) }

    package func giveBackAll() async throws { try await leases.leave() }

    package func runEnded(_ id: UUID) { leases.runEnded(id) }

    package func sendBackOverCaps() async throws -> [UUID] {
        try await fleet.sendBackOverCaps()
    }

    /// Until cancelled: renews this node's leases (the heartbeat, at a third of the lease's
    /// length, and at once when another node changed a task running here), and says which
    /// runs must stop — leases found lost, and, while the database does not answer (a
    /// heartbeat can wait a minute for a connection), leases that ran out unrenewed, before
    /// another node can take their tasks over; it says too when work waits in the queue.
    package func maintainClaims(
        load: @escaping @Sendable () async -> SharedQueueLoad,
        notice: @escaping @Sendable (SharedQueueNotice) async -> Void
    ) async {
        let beatNow = Doorbell(clock: leases.timeline.clock)
        let signals = fleetSignals()
        do {
            try await fleet.join()
        } catch {
            logger.warning("cannot say this node joined the fleet", metadata: ["error": "\(error)"])
        }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await signal in signals {
                    switch signal {
                    case .task(let id) where self.leases.holds(id): beatNow.ring()
                    case .queue: await notice(.work)
                    case .settings: beatNow.ring()  // The fleet's rate cap may have changed.
                    case .resumed:
                        beatNow.ring()
                        await notice(.work)
                    default: break
                    }
                }
            }
            group.addTask { await self.beatUntilCancelled(beatNow, load: load, notice: notice) }
            group.addTask {
                while !Task.isCancelled {
                    try? await self.leases.timeline.sleep(for: self.watchInterval)
                    let runOut = self.leases.runOut()
                    if !runOut.isEmpty { await notice(.revoked(runOut)) }
                }
            }
            // Each runs until the manager cancels this (the signals' stream also ends when
            // the store closes; the heartbeat and the watch go on meanwhile).
            await group.waitForAll()
        }
    }

    /// The heartbeat: renews this node's leases at a third of their length, or at once when
    /// `beatNow` rings, and tells which were lost, and this node's part of the fleet's rate
    /// cap when it changed.
    private func beatUntilCancelled(
        _ beatNow: Doorbell,
        load: @escaping @Sendable () async -> SharedQueueLoad,
        notice: @escaping @Sendable (SharedQueueNotice) async -> Void
    ) async {
        let (beat, timeline) = (leases.duration / 3, leases.timeline)
        var share: Int64?? = .none
        while !Task.isCancelled {
            let began = timeline.now
            do {
                let now = await load()
                let lost = try await leases.heartbeat(bytesPerSecond: now.bytesPerSecond, rateLimit: now.rateLimit)
                if !lost.isEmpty { await notice(.revoked(lost)) }
                let part = try await fleet.rateShare(own: now.rateLimit, duration: leases.duration)
                if share != .some(part) {
                    share = part
                    await notice(.rateShare(part))
                }
            } catch {
                logger.warning("the fleet's heartbeat failed", metadata: ["error": "\(error)"])
            }
            await beatNow.wait(atMost: began + beat - timeline.now)
        }
    }
}

extension PostgresStore: FleetView {
    package var node: String { fleet.node }

    package var leaseDuration: Duration { leases.duration }

    package var storeDescription: String { location.map { "\($0)" } ?? "PostgreSQL" }

    package func fleetNodes() async throws -> [API.Status.Fleet.Node] {
        try await fleet.report.nodes()
    }

    package func fleetSignals() -> AsyncStream<FleetSignal> {
        signals.subscribe(client: client, logger: logger)
    }

    package func fleetCaps() async throws -> API.FleetCaps { try await settings.caps() }

    /// Saves the caps set in `caps` (0: none); every node hears of it.
    package func saveFleetCaps(_ caps: API.FleetCaps) async throws {
        try await settings.save([], of: node, caps: caps)
    }

    package func nodeLimits(of node: String) async throws -> StoredLimits {
        StoredLimits.reading(try await settings.numeric(of: node)).limits
    }

    package func saveLimits(_ limits: StoredLimits, of node: String, caps: API.FleetCaps?) async throws {
        try await settings.save(limits.storedValues, of: node, caps: caps)
    }

    package func requestDrain(of node: String, finishing: Bool) async throws {
        try await fleet.requestDrain(of: node, finishing: finishing, duration: leases.duration)
    }

    package func drainRequest() async throws -> Bool? { try await fleet.drainRequest() }

    package func stopTakingWork() { leases.stopTakingWork() }

    package func placeFinished(
        _ id: UUID,
        completing checkpoint: CheckpointRecord?,
        _ place: @escaping @Sendable () async throws -> Void
    ) async throws {
        guard leases.isBooked(id) else {
            try await place()
            if let checkpoint {
                try await self.checkpoint(
                    id,
                    segments: checkpoint.segments,
                    sources: checkpoint.sources,
                    verifiedPieces: checkpoint.verifiedPieces,
                    completing: true
                )
            }
            return
        }
        let write = try TaskWrite.checkpoint(checkpoint, completing: true)
        try await leases.fencedStatement(id, "record a finished download", final: true, transaction: true) {
            connection,
            fence in
            // The row is written, and locked under this node's lease, before the file is
            // placed, until the commit: a pause or cancel from another node waits, then finds
            // the task completed. A placement that fails rolls the completion back.
            guard try await write.run(on: connection, id: id, fence: fence, logger: self.logger) != nil else {
                return (false, ())
            }
            try await place()
            if let verified = checkpoint?.verifiedPieces {
                try await self.tables.setVerifiedPieces(connection, id, verified)
            }
            return (true, ())
        }
        // Completed toward every node: the full completion that follows is this node's to
        // record, with no lease left to check.
        leases.end(id)
    }
}
