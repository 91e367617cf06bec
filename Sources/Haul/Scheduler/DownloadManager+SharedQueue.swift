import Foundation

// MARK: - A shared queue: tasks run here under claims (SharedQueue.swift)

extension DownloadManager {
    /// How often an idle manager asks the shared queue for work.
    static let claimPollInterval: Duration = .milliseconds(250)

    /// With a shared queue, until shutdown: claims its waiting tasks as the shared limits
    /// leave room and starts them here — when a run here ends, when the queue says work
    /// waits, and every ``claimPollInterval`` for what other managers freed — while the
    /// queue keeps the claims alive; a task whose claim was revoked stops here, writing
    /// nothing. At shutdown, once the transfers have yielded, the claims still held go back
    /// at once.
    nonisolated func claimUntilShutdown() async {
        guard let sharedQueue else { return }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await sharedQueue.maintainClaims(
                    load: {
                        SharedQueueLoad(
                            bytesPerSecond: await self.overallProgress().bytesPerSecond,
                            rateLimit: self.overallRateLimit
                        )
                    },
                    notice: { await self.noticed($0) }
                )
            }
            while await !self.isShuttingDown, !Task.isCancelled {
                await self.claimWaitingTasks()
                await self.claimDoorbell.wait(atMost: DownloadManager.claimPollInterval)
            }
            // Stopping: the claims are kept no more.
            group.cancelAll()
        }
    }

    /// With a shared queue, after its caps over every manager were lowered: the tasks
    /// running over them anywhere go back to waiting, the most recently started first, as on
    /// one machine (where ``setMaxConcurrentDownloads(_:)`` alone does it). The managers
    /// running them stop at once and continue them later from their checkpoints.
    package func sendBackOverCaps() async throws {
        guard let sharedQueue else { return }
        stopRevoked(Set(try await sharedQueue.sendBackOverCaps()))
    }

    /// Acts on what the shared queue said.
    func noticed(_ notice: SharedQueueNotice) {
        switch notice {
        case .revoked(let ids): stopRevoked(ids)
        case .work: claimDoorbell.ring()
        case .rateShare(let share): applyRateLimits { $0.shared = share }
        }
    }

    var isShuttingDown: Bool { shuttingDown }

    /// Claims as many waiting tasks as this manager may still run and starts them.
    func claimWaitingTasks() async {
        guard let sharedQueue, !shuttingDown, !machine.storeRefusing else { return }
        // (With a shared queue every task waiting in this manager's line is claimed already:
        // one that yields goes back to the shared queue.)
        // At its limit too: the queue hears a changed limit at once (it shares the work by
        // each manager's free room); it answers nothing without asking anyone else.
        let wanted = max(0, machine.maxConcurrent - machine.running.count - machine.waitingIDs.count)
        let ids: [UUID]
        do {
            ids = try await sharedQueue.claim(
                wanted: wanted,
                maxRunning: machine.maxConcurrent,
                perHost: machine.perHostLimit
            )
        } catch {
            logger.warning("cannot claim tasks in the shared queue", metadata: ["error": "\(error)"])
            return
        }
        guard !ids.isEmpty else { return }
        // Read in one go, as their runs read them first; in the order claimed (the queue's).
        let read = (try? await store.tasksForRun(ids: ids)) ?? []
        let records = Dictionary(read.map { ($0.task.id, $0) }) { first, _ in first }
        for id in ids {
            // One that an add here has recorded and not announced yet is the add's to announce
            // and queue: claimed now it would run before (or without) its `added` event. Its
            // claim goes back below; the next claim after the add takes it.
            if adding.contains(id) {
                claimLeftAddedTasks = true
                continue
            }
            guard let (record, segments) = records[id], mayStart(record, under: sharedQueue) else { continue }
            disarmRetry(id)
            machine.claimed(DownloadManager.entry(for: record))
            if let segments { startReads[id] = (record, segments) }
        }
        // Those that start now start from this read, taken under their claims; one that
        // waits in line reads its task again when it starts (it may change meanwhile).
        admitAndStart()
        startReads.removeAll()
        await giveBackUnstarted(ids, to: sharedQueue)
    }

    /// Gives back the claims just taken whose tasks did not start. A claim taken and not
    /// started waits here in line: the queue may count a run that just recorded its end,
    /// which this manager's line still holds for a moment (its per-host cap then says no),
    /// and it starts as soon as that run has ended here. One whose task vanished or was
    /// stopped meanwhile, or taken as the manager began to stop, goes straight back, so that
    /// it does not hold a place for nothing. One whose stop is being recorded is left to the
    /// stop: its write ends the claim, and a claim given back meanwhile would queue the task
    /// again under it, refusing the stop's write.
    private func giveBackUnstarted(_ ids: [UUID], to sharedQueue: any SharedQueue) async {
        for id in ids where !machine.isRunning(id) && !machine.isWaiting(id) && !machine.stopping.contains(id) {
            guard sharedQueue.holdsClaim(id) else {
                // Revoked before it started (its time ran out unrenewed): no run here holds
                // it, so nothing is left to refuse. Forgotten — a revoked claim stays until
                // its run ends, and with no run the task would be passed over here for ever.
                sharedQueue.abandonClaim(id)
                continue
            }
            do {
                try await sharedQueue.giveBack(id)
            } catch {
                logger.warning("cannot give a claim back; it runs out by itself", metadata: ["error": "\(error)"])
            }
        }
    }

    /// Whether the claim just taken on `record`'s task may start it here. Not while a stop of
    /// the task is being recorded here (it was asked before the claim was seen), nor when the
    /// task changed since the claim was taken — paused, cancelled or removed, here or by
    /// another manager, which ended the claim: the task is then known here as the store has
    /// it. A run started on such a claim would have nothing left to refuse its writes, and
    /// would record "running" over the stop.
    private func mayStart(_ record: TaskRecord, under sharedQueue: any SharedQueue) -> Bool {
        if machine.stopping.contains(record.id) { return false }
        if record.state == .running { return sharedQueue.holdsClaim(record.id) }
        // (Read running with its claim gone since: taken elsewhere, which changes nothing
        // here, or stopped here after the read, which the read must not undo.)
        if !machine.isRunning(record.id), let state = machine.state(of: record.id), state != record.state {
            adopt(record)
        }
        return false
    }

    /// Stops the transfers of tasks whose claim was revoked; each ends with
    /// ``HaulError/Code/revoked`` at its next (refused) write.
    func stopRevoked(_ revoked: Set<UUID>) {
        for id in revoked where machine.isRunning(id) {
            runs[id]?.handles.control.request(.yield)
        }
    }

    /// With a shared queue, before an operation on task `id`: what this manager knows of it,
    /// brought up to date from the shared store unless it runs here — another manager may
    /// have added, run, paused or finished it since. A task running elsewhere counts as
    /// waiting here: a pause, cancel or removal is written to the store, which revokes its
    /// claim, and the manager running it stops at its next write or when its queue says so.
    func refreshFromSharedStore(_ id: UUID) async {
        guard sharedQueue != nil, !machine.isRunning(id) else { return }
        guard let record = try? await store.task(id: id) else { return }
        guard !machine.isRunning(id) else { return }  // Started here meanwhile.
        adopt(record)
    }

    /// Knows task `record` here as the shared store has it (one running elsewhere counts as
    /// waiting here).
    private func adopt(_ record: TaskRecord) {
        if machine.changedElsewhere(DownloadManager.entry(for: record), record.state) { disarmRetry(record.id) }
    }

    /// Gives the shared queue back every claim still held (after the transfers stopped).
    func giveBackClaims() async {
        guard let sharedQueue else { return }
        do {
            try await sharedQueue.giveBackAll()
        } catch {
            logger.warning(
                "cannot give the shared queue's claims back; they run out by themselves",
                metadata: ["error": "\(error)"]
            )
        }
    }
}
