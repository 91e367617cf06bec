import Foundation

// MARK: - Fleet mode: tasks run under leases from a shared queue

extension DownloadManager {
    /// How often an idle node asks the fleet's queue for work.
    static let fleetPollInterval: Duration = .milliseconds(250)

    /// In fleet mode, until shutdown: takes leases on the fleet's waiting tasks as the
    /// fleet-wide limits leave room and starts them here — when a run here ends, and every
    /// ``fleetPollInterval`` for what other nodes freed — and, apart, so that a slow
    /// admission never delays it, renews this node's leases (the heartbeat, at a third of
    /// the lease's length); a task whose lease was lost, or ran out while the database did
    /// not answer, stops here, writing nothing. At
    /// shutdown, once the transfers have yielded, the leases still held go back at once.
    nonisolated func takeLeasesUntilShutdown() async {
        guard let fleet else { return }
        let signals = fleet.fleetSignals()
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                for await signal in signals { await self.fleetSignalled(signal) }
            }
            group.addTask { await self.beatUntilShutdown(fleet) }
            group.addTask { await self.watchLeasesUntilShutdown(fleet) }
            while await !self.isShuttingDown, !Task.isCancelled {
                await self.takeLeases()
                await self.leaseDoorbell.wait(atMost: DownloadManager.fleetPollInterval)
            }
            // Stopping: this node listens no more, and beats no more.
            group.cancelAll()
        }
    }

    /// In fleet mode, after the limits were lowered: the tasks running over them anywhere in
    /// the fleet go back to waiting, the most recently started first, as on one machine
    /// (where ``setMaxConcurrentDownloads(_:)`` alone does it). The nodes running them stop
    /// at once and continue them later from their checkpoints.
    package func keepFleetWithinLimits() async throws {
        guard let fleet else { return }
        let sent = try await fleet.sendBackOverLimits(
            maxRunning: scheduler.maxConcurrent,
            perHost: scheduler.perHostLimit
        )
        if sent.contains(where: { running.contains($0) }) { beatDoorbell.ring() }
    }

    /// Acts on what another node signalled: a task running here that was changed elsewhere
    /// has its lease checked now (the heartbeat then stops it); waiting work is leased now.
    func fleetSignalled(_ signal: FleetSignal) {
        switch signal {
        case .task(let id) where running.contains(id): beatDoorbell.ring()
        case .queue: leaseDoorbell.ring()
        case .resumed:
            beatDoorbell.ring()
            leaseDoorbell.ring()
        default: break
        }
    }

    /// The heartbeat: renews this node's leases at a third of their length, and stops the
    /// runs whose lease was lost.
    nonisolated private func beatUntilShutdown(_ fleet: any FleetTaskStore) async {
        let beat = fleet.leaseDuration / 3
        while await !isShuttingDown, !Task.isCancelled {
            let began = ContinuousClock.now
            do {
                let lost = try await fleet.heartbeat(bytesPerSecond: await overallProgress().bytesPerSecond)
                await stopLost(lost)
            } catch {
                logger.warning("the fleet's heartbeat failed", metadata: ["error": "\(error)"])
            }
            // Until the next beat is due, or a task running here was changed elsewhere.
            await beatDoorbell.wait(atMost: began + beat - ContinuousClock.now)
        }
    }

    /// Stops, while the database does not answer (a heartbeat can wait a minute for a
    /// connection), the runs whose leases ran out unrenewed, before another node can take
    /// their tasks over: checked at a tenth of the lease's length.
    nonisolated private func watchLeasesUntilShutdown(_ fleet: any FleetTaskStore) async {
        while await !isShuttingDown, !Task.isCancelled {
            try? await Task.sleep(for: fleet.leaseDuration / 10)
            let runOut = fleet.leasesRunOut()
            if !runOut.isEmpty { await stopLost(runOut) }
        }
    }

    var isShuttingDown: Bool { shuttingDown }

    /// Takes leases for as many tasks as this node may still run and starts them.
    func takeLeases() async {
        guard let fleet, !shuttingDown, !storeRefusing else { return }
        // (In fleet mode every task waiting in this node's line holds a lease already.)
        let wanted = scheduler.maxConcurrent - running.count - scheduler.waitingIDs.count
        guard wanted > 0 else { return }
        let ids: [UUID]
        do {
            ids = try await fleet.acquireLeases(
                wanted: wanted,
                maxRunning: scheduler.maxConcurrent,
                perHost: scheduler.perHostLimit
            )
        } catch {
            logger.warning("cannot take leases in the fleet's queue", metadata: ["error": "\(error)"])
            return
        }
        for id in ids {
            guard let record = try? await store.task(id: id), mayStart(record, under: fleet) else { continue }
            let entry = DownloadManager.entry(for: record)
            if known[id]?.retryTimer != nil { disarmRetry(id) }
            if let task = known[id], task.state == .queued {
                known[id]?.entry = entry
            } else {
                // Known here in another state (changed elsewhere since), or not at all: the
                // fleet's queue had it waiting.
                known[id] = ManagedTask(.queued, entry: entry)
            }
            scheduler.enqueue(entry)
        }
        guard !ids.isEmpty else { return }
        admitAndStart()
        // A lease taken and not started waits here in line: the fleet may count a run that
        // just recorded its end, which this node's line still holds for a moment (its per-host
        // cap then says no), and it starts as soon as that run has ended here. One whose
        // task vanished or was stopped meanwhile, or taken as the manager began to stop, goes
        // straight back, so that it does not hold a place for nothing.
        for id in ids where !running.contains(id) && !scheduler.isWaiting(id) {
            guard fleet.holdsLease(id) else {
                // Lost before it started (its time ran out unrenewed): no run here holds it,
                // so nothing is left to fence. Forgotten — a lost lease stays booked until
                // its run ends, and with no run the task would be passed over here for ever.
                fleet.abandonLease(id)
                continue
            }
            scheduler.remove(id)
            do {
                try await fleet.releaseLease(id)
            } catch {
                logger.warning("cannot give a lease back; it runs out by itself", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Whether the lease just taken on `record`'s task may start it here. Not while a stop of
    /// the task is being recorded here (it was asked before the lease was seen), nor when the
    /// task changed since the lease was taken — paused, cancelled or removed, here or on
    /// another node, which ended the lease: the task is then known here as the store has
    /// it. A run started on such a lease would have no fence left to stop its writes, and
    /// would record "running" over the stop.
    private func mayStart(_ record: TaskRecord, under fleet: any FleetTaskStore) -> Bool {
        if stopsUnderWay.contains(record.id) { return false }
        if record.state == .running, fleet.holdsLease(record.id) { return true }
        if !running.contains(record.id), let state = known[record.id]?.state, state != record.state {
            adopt(record)
        }
        return false
    }

    /// Stops the transfers of tasks whose lease this node lost; each ends with
    /// ``HaulError/Code/leaseLost`` at its next (refused) write.
    func stopLost(_ lost: Set<UUID>) {
        for id in lost where running.contains(id) {
            known[id]?.transfer?.control.request(.yield)
        }
    }

    /// In fleet mode, before an operation on task `id`: what this node knows of it, brought
    /// up to date from the shared store unless it runs here — another node may have added,
    /// run, paused or finished it since. A task running elsewhere counts as waiting here: a
    /// pause, cancel or removal is written to the store, which ends its lease there, and the
    /// node running it stops at its next write or heartbeat.
    func refreshFromFleet(_ id: UUID) async {
        guard fleet != nil, !running.contains(id) else { return }
        guard let record = try? await store.task(id: id) else { return }
        guard !running.contains(id) else { return }  // Started here meanwhile.
        adopt(record)
    }

    /// Knows task `record` here as the shared store has it (one running elsewhere counts as
    /// waiting here).
    private func adopt(_ record: TaskRecord) {
        let state = record.state == .running ? TaskState.queued : record.state
        guard known[record.id]?.state != state else { return }
        if known[record.id]?.retryTimer != nil { disarmRetry(record.id) }
        known[record.id] = ManagedTask(state, entry: DownloadManager.entry(for: record))
    }

    /// Gives the fleet back every lease still held (after the transfers stopped).
    func leaveFleet() async {
        guard let fleet else { return }
        do {
            try await fleet.leaveFleet()
        } catch {
            logger.warning(
                "cannot give the fleet's leases back; they run out by themselves",
                metadata: ["error": "\(error)"]
            )
        }
    }
}
