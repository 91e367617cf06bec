import Foundation

// MARK: - Running one transfer

extension DownloadManager {
    /// Runs a started task's transfer on the one execution path every download takes
    /// (``TransferHandles/execute(_:segments:environment:)``), then hands its end back.
    /// `read`: the task and its segments as read already (with its claim), else read here.
    nonisolated func execute(_ id: UUID, _ handles: TransferHandles, read: (TaskRecord, [SegmentRecord])?) async {
        let ended: Result<DownloadResult, HaulError>
        var task: TaskRecord?
        do {
            let stored = if let read { read } else { try await store.taskForRun(id) }
            guard let (record, segments) = stored else {
                throw HaulError(.store, "Task \(id.shown) vanished from the store")
            }
            task = record
            HaulMetrics.queueWait(Date().timeIntervalSince(record.queuedAt))
            let committed = segments.reduce(0) { $0 + ($1.committed - $1.start) }
            if committed > 0 { hub.publish(.resumed(id: id, offset: committed, expectedTotal: record.totalLength)) }
            handles.limiter.setInitialRate(record.rateLimit)
            let environment = await environment(for: record)
            if let host = record.url.host, networkBlockAtStart(host: host, allowsMetered: record.allowsMetered) != nil {
                // No usable route now: the task waits for the network without trying.
                var error = HaulError(
                    .connection,
                    "No usable route to \(record.url.host ?? "the server")",
                    url: record.url,
                    hint: "Check the network connection"
                )
                error.network = NetworkFailure(kind: .unreachable, endpoint: record.url.host ?? "")
                ended = .failure(error)
            } else {
                ended = await handles.execute(record, segments: segments, environment: environment)
            }
        } catch {
            ended = .failure(error as? HaulError ?? HaulError(.store, "\(error)"))
        }
        var outcome = ended.mapError { told($0, about: id) }
        if case .failure(let error) = outcome, error.code == .revoked {
            // What the task is now, as the shared store has it: paused or cancelled by
            // another manager, taken over, or removed — unknown when the store does not
            // answer within a claim's time (the claim may have been revoked for that reason).
            let store = self.store
            let wait = sharedQueue?.claimDuration ?? .seconds(15)
            let timeline = downloader.timeline
            let read = try? await valueOrNil(
                of: { try await store.task(id: id) },
                unlessFirst: { try? await timeline.sleep(for: wait) }
            )
            await noteStateElsewhere(id, read.map { $0?.state })
        }
        if case .success(let result) = outcome, let task {
            // A Metalink's files are added before its completion is announced, so whoever
            // follows the task learns of them with it.
            outcome = .success(await follow(result, of: task))
        }
        if case .failure(let error) = outcome, error.code != .revoked {
            let stop = handles.control.requested
            if stop == .yield || stop == nil, await goOffline(id, after: stop == nil ? error : nil) { return }
            if stop == nil, await retryLater(id, after: error, progressed: handles.progress.snapshot().bytesThisRun > 0)
            {
                return
            }
            if stop == nil, error.code != .store, await defersFailureRecord {
                await recordFailure(id, error)
            }
        }
        await transferEnded(
            id,
            outcome: outcome,
            stop: handles.control.requested,
            mayHaveHooks: task.map { $0.hooks != .none } ?? true
        )
    }

    /// The environment a run of `record` transfers in: the downloader's, with this manager's
    /// shared connections per host, its claim over the file's placement (a shared queue), the
    /// failures it decides itself, and its view of the network.
    nonisolated private func environment(for record: TaskRecord) async -> TransferEnvironment {
        var environment = downloader.environment
        // The host's connections are shared among its downloads; one never asks for more
        // than the whole cap.
        environment.hostConnections = hostConnections
        environment.connectionCap = hostConnections.cap
        if let sharedQueue {
            // The file is placed under this manager's claim on the task.
            environment.placeFinished = { id, checkpoint, place in
                try await sharedQueue.placeFinished(id, completing: checkpoint, place)
                return checkpoint != nil
            }
        }
        // This manager decides what a failure becomes (failed, retrying, waiting).
        environment.defersFailureRecord = await defersFailureRecord
        if watchesNetwork {
            // A run whose server has no route does not spend its retries waiting: it ends,
            // and the task waits for the network instead.
            let allowsMetered = record.allowsMetered
            environment.isOffline = { [weak self] url in
                guard let self, let host = url.host else { return false }
                return self.networkBlock(host: host, allowsMetered: allowsMetered) != nil
            }
        }
        return environment
    }

    func noteStateElsewhere(_ id: UUID, _ state: TaskState??) {
        machine.noteStateElsewhere(id, state)
    }

    /// `error` as this manager's users are to read it: a daemon's task is continued with
    /// `haul resume ID`, not by running a command again.
    nonisolated func told(_ error: HaulError, about id: UUID) -> HaulError {
        guard background, var hint = error.hint else { return error }
        // A failed task's next try, with or without bytes kept, is `haul resume`.
        let resume = "resume it with 'haul resume \(id.shown.prefix(8))'"
        for phrase in [HaulError.rerunToResume, HaulError.rerunToRetry] {
            hint = hint.replacingOccurrences(of: phrase, with: resume)
        }
        var error = error
        error.hint = hint
        return error
    }

    /// A run that ended is over for a task that now waits outside the queue (to try again,
    /// for the network): it leaves the running set and the line, moves by `actions` (which
    /// the machine gave for it), and whoever waited for the run's end goes on.
    func leaveRun(_ id: UUID, _ actions: (inout ManagerMachine) -> [ManagerAction]) {
        let run = runEndedHere(id)
        perform(actions(&machine))
        for waiter in run?.endWaiters ?? [] { waiter.resume() }
    }

    /// The run's handles, which it leaves; with a shared queue, the queue hears it ended.
    private func runEndedHere(_ id: UUID) -> RunningTransfer? {
        if let sharedQueue {
            sharedQueue.runEnded(id)
            claimDoorbell.ring()
        }
        return runs.removeValue(forKey: id)
    }

    /// Whether this manager's transfers leave their failures to it to record.
    var defersFailureRecord: Bool { keepTrying != nil || watchesNetwork }

    /// Records a failure the transfer left to the manager; a store that refuses gets it later
    /// (``reconcile()``).
    func recordFailure(_ id: UUID, _ failure: HaulError) async {
        do {
            try await store.setState(id, .failed, error: failure.description, code: failure.code)
        } catch {
            machine.owe(id, message: failure.description)
        }
    }

    /// Moves a task by how its transfer ended, wakes whoever waited for that, and starts
    /// what may start now.
    /// - Parameter mayHaveHooks: false when the task is known to have no hooks of its own
    ///   (its record is then not read again to find them).
    func transferEnded(
        _ id: UUID,
        outcome: Result<DownloadResult, HaulError>,
        stop: StopReason?,
        mayHaveHooks: Bool = true
    ) {
        let run = runEndedHere(id)
        let end: RunEnd
        let ending: Ending
        switch outcome {
        case .success(let result):
            (end, ending) = (.completed, .completed(result))
        case .failure(let error):
            ending = .failed(error)
            switch error.code {
            case .revoked:
                let elsewhere = machine[id].flatMap { $0.stateElsewhere }
                logger.warning(
                    "stopped a download whose claim in the shared queue was revoked",
                    metadata: [
                        "haul.task": "\(id)", "state": "\(elsewhere.map { $0?.rawValue ?? "removed" } ?? "unknown")",
                    ]
                )
                end = .revoked
            case .store:
                end = .storeRefused(error.description, sharing: sharedQueue != nil)
                noteStoreRefused(id, error: error, stop: stop)
            case .paused: end = .paused
            case .cancelled: end = .cancelled
            default: end = .failed
            }
        }
        perform(
            machine.runEnded(id, end, stop: stop),
            ending: ending,
            mayHaveHooks: mayHaveHooks || run?.hooksAdded == true
        )
        for waiter in run?.endWaiters ?? [] { waiter.resume() }
        admitAndStart()
    }
}
