import Foundation

// MARK: - Restart recovery and the store's failures

extension DownloadManager {
    /// How many tasks recovery reads at once: a queue of a million is read in pages, never
    /// held whole.
    static let recoveryPage = 10_000

    /// Queues again every task that was queued, or running when its process died, in its
    /// original order; keeps paused and failed ones as they are, and knows the finished
    /// ones, so they can still be removed. Reads the store a page at a time, in queue order;
    /// each page starts at the last one's final place, so tasks a store holds at one place
    /// are all read (a page of nothing new reads a larger one).
    func recover() async throws {
        var from: Int64?
        var limit = DownloadManager.recoveryPage
        while true {
            let after = from.map { $0 == .min ? $0 : $0 - 1 }
            let page = try await store.tasks(
                inStates: TaskState.allCases,
                background: background,
                after: after,
                limit: limit
            )
            var fresh = 0
            // A task added meanwhile (when `run()` was called by hand) is already known.
            for record in page where machine[record.id] == nil {
                fresh += 1
                try await recover(record)
            }
            guard page.count == limit, let last = page.last?.queueOrder else { break }
            from = last
            limit = fresh == 0 ? limit * 2 : DownloadManager.recoveryPage
        }
        admitAndStart()
    }

    /// Knows one task found in the store when the manager opened.
    private func recover(_ record: TaskRecord) async throws {
        let entry = DownloadManager.entry(for: record)
        switch record.state {
        case .running where sharedQueue != nil:
            // Another manager runs it, or its claim runs out and the shared queue gives
            // it to the next manager that asks. Not running here, nor in line.
            machine.recovered(record.id, .queued, entry: entry, inLine: false)
        case .running:
            // Its process died while it ran: it waits again.
            try await store.setState(record.id, .queued)
            machine.recovered(record.id, .queued, entry: entry)
        case .waitingForNetwork:
            if let host = record.url.host, networkBlock(host: host, allowsMetered: record.allowsMetered) == nil {
                // The network came back while no manager watched.
                try await store.setState(record.id, .queued)
                machine.recovered(record.id, .queued, entry: entry)
            } else {
                machine.recovered(record.id, .waitingForNetwork, entry: entry)
            }
        case .retrying:
            machine.recovered(record.id, .retrying, entry: entry)
            // A manager that does not keep trying takes the task for its next try now.
            armRetry(record.id, at: keepTrying == nil ? timeline.date : (record.nextTryAt ?? timeline.date))
        default:
            machine.recovered(record.id, record.state, entry: entry)
        }
    }

    /// A run ended because the store could not record it (a full disk, say): whatever the
    /// store says of the task may be behind. Its data is safe: checkpoints record only
    /// synced bytes. With a shared queue the claim is left to run out there, and the task
    /// goes back to the shared queue, to continue from its last recorded checkpoint on
    /// whichever manager takes it next — this one too. Otherwise (or for a pause or cancel
    /// that was stopping it) the machine moves it to the state it was stopping for, or holds
    /// it, queued, to run again once the store accepts writes (``reconcile()``).
    func noteStoreRefused(_ id: UUID, error: HaulError, stop: StopReason?) {
        if let sharedQueue {
            sharedQueue.abandonClaim(id)
            if stop != .pause && stop != .cancel {
                logger.warning(
                    "the shared store could not record this download; it goes back to the shared queue and continues from its last checkpoint",
                    metadata: ["haul.task": "\(id)", "error": "\(error)"]
                )
                return
            }
        }
        if stop == nil, (machine[id]?.storeFailures ?? 0) + 1 < ManagerMachine.storeFailureLimit {
            logger.warning(
                "the store could not record this download; it runs again once the store can be written",
                metadata: ["haul.task": "\(id)", "error": "\(error)"]
            )
        }
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
        guard machine.storeRefusing || machine.owesStore else { return true }  // Nothing owed.
        for (id, state, message) in machine.unrecordedStates {
            do {
                try await store.setState(id, state, error: state == .failed ? message : nil)
            } catch {
                break  // Still refused: try again at the next tick.
            }
            // Changed meanwhile: its own write, or the next tick, records the new state.
            machine.recorded(id, state, message: message)
        }
        // Nothing left to write (what failed was removed, say): the next start finds out.
        machine.requeueHeld()
        admitAndStart()
        return true
    }

    /// A task as its store record says, with the state this manager knows when the store
    /// does not have it yet (``ManagerSnapshot/shown(_:)``).
    func overlaid(_ info: DownloadInfo) -> DownloadInfo {
        machine.snapshot.shown(info)
    }
}
