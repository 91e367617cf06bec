import Foundation

// MARK: - Restart recovery and the store's failures

extension DownloadManager {
    /// Queues again every task that was queued, or running when its process died, in its
    /// original order; keeps paused and failed ones as they are, and knows the finished
    /// ones, so they can still be removed.
    func recover() async throws {
        let records = try await store.tasks(inStates: TaskState.allCases, background: background)
        for record in records {
            // A task added meanwhile (when `run()` was called by hand) is already known.
            guard known[record.id] == nil else { continue }
            let state = record.state
            if state == .completed || state == .cancelled {
                known[record.id] = ManagedTask(state)
                continue
            }
            var task = ManagedTask(state, entry: DownloadManager.entry(for: record))
            if state == .running, sharedQueue != nil {
                // Another manager runs it, or its claim runs out and the shared queue gives
                // it to the next manager that asks. Not running here.
                known[record.id] = ManagedTask(.queued, entry: task.entry)
                continue
            }
            if state == .running {
                _ = try? task.machine.handle(.recover)
                try await store.setState(record.id, .queued)
            }
            known[record.id] = task
            if task.state == .queued, let entry = task.entry { scheduler.enqueue(entry) }
            if task.state == .waitingForNetwork, let host = record.url.host,
                networkBlock(host: host, allowsMetered: record.allowsMetered) == nil
            {
                // The network came back while no manager watched.
                try await store.setState(record.id, .queued)
                _ = try? task.machine.handle(.online)
                known[record.id] = task
                if let entry = task.entry { scheduler.enqueue(entry) }
            }
            if task.state == .retrying {
                if keepTrying == nil {
                    // A manager that does not keep trying takes the task for its next try now.
                    armRetry(record.id, at: timeline.date)
                } else {
                    armRetry(record.id, at: record.nextTryAt ?? timeline.date)
                }
            }
        }
        admitAndStart()
    }

    /// How many runs in a row the store may fail for one task, while accepting other
    /// writes in between, before the task fails: a store that refuses only this task's
    /// records (it vanished, say) is not waited for forever.
    static let storeFailureLimit = 5

    /// A run ended because the store could not record it (a full disk, say): whatever the
    /// store says of the task may be behind. It moves to the state it was stopping for, or
    /// waits, queued, to run again once the store accepts writes (``reconcile()``); the
    /// store is brought up to date then. Its data is safe: checkpoints record only synced bytes.
    func storeFailed(_ id: UUID, error: HaulError, stop: StopReason?) {
        storeRefusing = true
        switch stop {
        case .pause:
            scheduler.remove(id)
            move(id, .pause)
        case .yield:
            move(id, .yield)
        case .cancel:
            scheduler.remove(id)
            move(id, .cancel)
        case nil:
            let failures = (known[id]?.storeFailures ?? 0) + 1
            known[id]?.storeFailures = failures
            scheduler.remove(id)
            guard failures < DownloadManager.storeFailureLimit else {
                known[id]?.storeFailures = 0
                move(id, .fail)
                known[id]?.unrecorded = .some(error.description)
                ended(id, .failed(error))
                return
            }
            logger.warning(
                "the store could not record this download; it runs again once the store can be written",
                metadata: ["haul.task": "\(id)", "error": "\(error)"]
            )
            move(id, .yield, reason: .storeRefused)
            known[id]?.heldForStore = true
        }
        if known[id]?.unrecorded == nil { known[id]?.unrecorded = .some(nil) }
    }

    /// With a shared queue, a run ended because the store could not record it (it did not
    /// answer): the claim is left to run out there, and the task goes back to the shared
    /// queue, to continue from its last recorded checkpoint on whichever manager takes it
    /// next — this one too. A pause or cancel that was stopping it is recorded later, as
    /// on one machine (``storeFailed(_:error:stop:)``).
    func storeFailedSharing(_ id: UUID, error: HaulError, stop: StopReason?) {
        sharedQueue?.abandonClaim(id)
        if stop == .pause || stop == .cancel {
            storeFailed(id, error: error, stop: stop)
            return
        }
        logger.warning(
            "the shared store could not record this download; it goes back to the shared queue and continues from its last checkpoint",
            metadata: ["haul.task": "\(id)", "error": "\(error)"]
        )
        scheduler.remove(id)
        move(id, .yield, reason: .storeRefused)
    }

    nonisolated func reconcileUntilShutdown() async {
        while await reconcile() {
            do {
                try await Task.sleep(for: .seconds(1))
            } catch {
                return
            }
        }
    }

    /// Writes the states the store missed, and runs the tasks held for it once it takes
    /// them; false once the manager is shutting down.
    func reconcile() async -> Bool {
        guard !shuttingDown else { return false }
        let owed = known.filter { $0.value.unrecorded != nil || $0.value.heldForStore }
        guard storeRefusing || !owed.isEmpty else { return true }  // Nothing owed.
        for (id, task) in owed {
            guard let message = task.unrecorded else { continue }
            let state = task.state
            do {
                try await store.setState(id, state, error: state == .failed ? message : nil)
                storeRefusing = false
            } catch {
                break  // Still refused: try again at the next tick.
            }
            // Changed meanwhile: its own write, or the next tick, records the new state.
            if known[id]?.state == state, known[id]?.unrecorded == message { known[id]?.unrecorded = nil }
        }
        // Nothing left to write (what failed was removed, say): the next start finds out.
        if !known.values.contains(where: { $0.unrecorded != nil }) { storeRefusing = false }
        for (id, task) in known where task.heldForStore && task.unrecorded == nil {
            known[id]?.heldForStore = false
            guard task.state == .queued, let entry = task.entry else { continue }
            scheduler.enqueue(entry)
        }
        admitAndStart()
        return true
    }

    /// A task as its store record says, with the state this manager knows when the store
    /// does not have it yet: running, for a run started here that the store still calls
    /// queued (a new download records "running" with its first response); the state kept
    /// here, when the store refused to record it.
    func overlaid(_ info: DownloadInfo) -> DownloadInfo {
        var info = info
        if info.state == .queued, running.contains(info.id) {
            info.state = .running
            return info
        }
        guard let task = known[info.id], let message = task.unrecorded else { return info }
        info.state = task.state
        info.errorMessage = task.state == .failed ? message : nil
        return info
    }
}
