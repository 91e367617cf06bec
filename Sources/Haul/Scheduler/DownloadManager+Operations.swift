import Foundation

// MARK: - Operations

extension DownloadManager {
    /// The priorities a task can have: higher starts sooner; 0 is the default.
    public static let priorities = -1_000...1_000

    /// - Throws: ``HaulError/Code/invalidArgument`` for a priority outside ``priorities``.
    public static func validatePriority(_ priority: Int) throws {
        guard priorities.contains(priority) else {
            throw HaulError(
                .invalidArgument,
                "Invalid priority \(priority): use a whole number from \(priorities.lowerBound) to \(priorities.upperBound)"
            )
        }
    }

    /// Queues a download (or finds the same URL already going to the same place, so a re-add
    /// does not duplicate it). It starts when the limits allow.
    /// - Parameters:
    ///   - request: what to download and where.
    ///   - priority: higher starts sooner than older tasks of lower priority.
    /// - Returns: the task as it stands now (queued, running, or already completed).
    /// - Throws: ``HaulError`` for a bad URL or an unusable destination.
    public func download(_ request: DownloadRequest, priority: Int = 0) async throws -> DownloadInfo {
        try await download([request], priority: priority)[0]
    }

    /// Queues many downloads, in order, as ``download(_:priority:)`` does each: all are
    /// checked, then found or recorded in one transaction, so a bad one adds none.
    /// - Parameter paused: the downloads are added paused (aria2's `pause` option): a new
    ///   one is recorded paused, so it never starts, here or by another manager sharing its
    ///   queue, until resumed; one already there that is going on is paused.
    /// - Returns: the tasks as they stand now, in the order of `requests`.
    public func download(
        _ requests: [DownloadRequest],
        priority: Int = 0,
        paused: Bool = false
    ) async throws -> [DownloadInfo] {
        try DownloadManager.validatePriority(priority)
        // Known as this add's before they are in the store: a shared queue's claim may find
        // them there before this add announces them, and leaves them to it (they would run
        // unannounced otherwise: ``claimWaitingTasks()``).
        let ids = requests.map { _ in UUID() }
        adding.formUnion(ids)
        defer { adding.subtract(ids) }
        let prepared = try await downloader.prepare(
            requests,
            background: background,
            priority: priority,
            paused: paused,
            ids: ids
        )
        var infos: [DownloadInfo] = []
        infos.reserveCapacity(prepared.count)
        // The new tasks as just recorded, as many as may start at once: those that do run
        // from this, without reading back what the add wrote; one that waits in line reads
        // its task when it starts (it may change meanwhile).
        var recorded: [UUID: (TaskRecord, [SegmentRecord])] = [:]
        let room = sharedQueue == nil ? max(0, machine.maxConcurrent - machine.running.count) : 0
        for item in prepared {
            guard !item.isNew else {
                infos.append(enqueueNew(item.record))
                adding.remove(item.record.id)
                if recorded.count < room {
                    recorded[item.record.id] = (DownloadManager.readForRun(item.record), item.segments)
                }
                continue
            }
            let info = try await inTurn(item.record.id) {
                let info = try await reAdded(item.record, priority: priority)
                guard paused, [.queued, .running, .retrying, .waitingForNetwork].contains(info.state) else {
                    return info
                }
                try await stop(info.id, .pause)
                return try await self.info(info.id)
            }
            infos.append(info)
        }
        startReads.merge(recorded) { _, new in new }
        admitAndStart()
        for id in recorded.keys { startReads.removeValue(forKey: id) }
        // A claim that found new ones before they were announced left them: claim again.
        if claimLeftAddedTasks {
            claimLeftAddedTasks = false
            claimDoorbell.ring()
        }
        return infos
    }

    /// A task just inserted, as its run's first read (``TaskStore/taskForRun(_:)``) gives it:
    /// with its piece hashes as the store has them (the request's, none verified).
    private static func readForRun(_ inserted: TaskRecord) -> TaskRecord {
        var record = inserted
        record.storedPieces = .some(inserted.pieces.map { StoredPieces(hashes: $0, verified: nil) })
        return record
    }

    /// A task just recorded: it waits for its turn (or stays paused, as recorded), announced;
    /// nothing to read back.
    func enqueueNew(_ record: TaskRecord) -> DownloadInfo {
        let paused = record.state == .paused
        let info = DownloadInfo(record, state: paused ? .paused : .queued, bytesCommitted: 0)
        if let state = machine.added(DownloadManager.entry(for: record), paused: paused) {
            // Another add found it meanwhile (while this one awaited an earlier re-add) and queued it.
            var current = info
            current.state = state
            return current
        }
        hub.publish(.added(info))
        return info
    }

    /// A download that was already in the store: it goes on, runs again, or stays completed.
    /// In the task's turn.
    private func reAdded(_ record: TaskRecord, priority: Int) async throws -> DownloadInfo {
        var record = record
        let id = record.id
        if let state = machine.state(of: id) {
            // The store has the re-add's hooks now; a run under way learns that it has some.
            if record.hooks != .none { runs[id]?.hooksAdded = true }
            switch state {
            case .queued, .running: return try await info(id)
            case .paused, .failed, .retrying, .waitingForNetwork: return try await resumeInTurn(id, priority: priority)
            case .completed, .cancelled: break
            }
        }
        if record.priority != priority {
            try await store.setPriority(id, priority)
            record.priority = priority
        }
        if record.state != .completed || record.checkNewer {
            record.queueOrder = try await store.requeue(id, state: .queued)
        }
        // A completed task keeps its record: its transfer finds the verified file in place
        // and completes without a request (or fetches it again if the file is gone). One
        // that checks for a newer version is queued until the server has answered, so that
        // no reader (`haul wait`) takes the old file for the answer.
        return try await enqueueAdded(record, isNew: false)
    }

    /// Queues a download from resume data produced by pausing one task, a failure, or another
    /// process; it continues from the committed bytes when its part file is still there.
    /// - Throws: ``HaulError`` when the task is already queued or running here, or the
    ///   resume data does not describe a usable download.
    public func download(resumingFrom resumeData: ResumeData, priority: Int = 0) async throws -> DownloadInfo {
        try await inTurn(resumeData.taskID) {
            if let state = machine.state(of: resumeData.taskID), state == .queued || state == .running {
                throw HaulError(.invalidArgument, "Task \(resumeData.taskID.shown) is already \(state.rawValue)")
            }
            var record = try await downloader.prepare(resumingFrom: resumeData, background: background).record
            record.queueOrder = try await store.requeue(record.id, state: .queued)
            if record.priority != priority {
                try await store.setPriority(record.id, priority)
                record.priority = priority
            }
            return try await enqueueAdded(record, isNew: false)
        }
    }

    /// Makes a freshly added (or re-added) task wait for its turn and announces it.
    /// - Parameter isNew: a task just inserted has nothing committed, and needs no query to say so.
    func enqueueAdded(_ record: TaskRecord, isNew: Bool) async throws -> DownloadInfo {
        let id = record.id
        let committed = isNew ? 0 : try await info(id).bytesCommitted
        // A task known finished (or stopped) queues again, keeping what the store owes it.
        guard machine.addedAgain(DownloadManager.entry(for: record)) else {
            return try await info(id)  // Another add of the same download got here first.
        }
        hub.publish(.added(DownloadInfo(record, state: .queued, bytesCommitted: committed)))
        admitAndStart()
        return try await info(id)
    }

    /// Pauses a task, keeping its data. A running one checkpoints first.
    /// - Returns: resume data that continues it, here or in another process.
    /// - Throws: ``HaulError/Code/invalidArgument`` for an unknown task or one that is not queued or running.
    @discardableResult
    public func pause(_ id: UUID) async throws -> ResumeData {
        try await inTurn(id) {
            try await stop(id, .pause)
            return try await resumeData(id)
        }
    }

    /// Resumes a paused or failed task: it goes back to its place in the line (and, given a
    /// priority, among the tasks of that priority).
    @discardableResult
    public func resume(_ id: UUID, priority: Int? = nil) async throws -> DownloadInfo {
        if let priority { try DownloadManager.validatePriority(priority) }
        return try await inTurn(id) { try await resumeInTurn(id, priority: priority) }
    }

    func resumeInTurn(_ id: UUID, priority: Int?) async throws -> DownloadInfo {
        await refreshFromSharedStore(id)
        let state = try currentState(id)
        guard TaskStateMachine.next(from: state, on: .resume) != nil else {
            throw HaulError(.invalidArgument, "Cannot resume task \(id.shown): it is \(state.rawValue)")
        }
        if let priority { try await store.setPriority(id, priority) }
        // Back to its place: in the line, ahead of what was added after it, and in lists.
        let order = try await store.requeue(id, state: .queued, keepingPlace: true)
        disarmRetry(id)
        perform(machine.resumed(id, order: order, priority: priority))
        admitAndStart()
        return try await info(id)
    }

    /// Puts tasks in this order in the waiting line: they take the places in the queue they
    /// hold between them (others keep theirs), so among tasks of one priority they start
    /// in this order. aria2's `changePosition`.
    /// - Throws: ``HaulError/Code/notFound`` for an unknown task; nothing changes then.
    public func reorder(_ ids: [UUID]) async throws {
        guard Set(ids).count == ids.count else { throw HaulError(.invalidArgument, "A task is named twice") }
        let orders = try await store.reorder(ids)
        for (id, order) in orders { machine.changeEntry(id) { $0.queueOrder = order } }
    }

    /// Cancels a task and deletes its partial data. The task stays listed as cancelled.
    public func cancel(_ id: UUID) async throws {
        try await inTurn(id) { try await stop(id, .cancel) }
    }

    /// Pauses or cancels a task, as the state machine allows from its state. A running one
    /// is asked to stop and concludes by it; one whose run had already concluded by an
    /// earlier stop (a limit lowered, its route gone) is stopped as a waiting task then.
    /// In the task's turn.
    func stop(_ id: UUID, _ reason: StopReason) async throws {
        let (event, target): (TaskStateMachine.Event, TaskState) =
            reason == .cancel ? (.cancel, .cancelled) : (.pause, .paused)
        await refreshFromSharedStore(id)
        let state = try currentState(id)
        guard TaskStateMachine.next(from: state, on: event) != nil else {
            throw HaulError(.invalidArgument, "Cannot \(event.rawValue) task \(id.shown): it is \(state.rawValue)")
        }
        guard state != .running else {
            runs[id]?.handles.control.request(reason)
            await waitForEnd(id)
            if let now = machine.state(of: id), now != target, TaskStateMachine.next(from: now, on: event) != nil,
                now != .running || machine.isRunning(id)
            {
                try await stop(id, reason)
            }
            return
        }
        disarmRetry(id)
        try await recordStopped(id, as: target, was: state)
        move(id, event)
        guard reason == .cancel else { return }
        // Cancelled is recorded: its partial data goes; a record of it left behind is harmless.
        if let record = try? await store.task(id: id), let path = record.partPath {
            let identity = record.partIdentity
            // On FileIO's threads: opening, locking and unlinking block, and this is the actor.
            _ = try? await uncancellable {
                try await FileIO.run { PartFile.remove(at: path, owner: id, identity: identity) }
            }
            try? await store.setPart(id, path: nil, identity: nil)
        }
    }

    /// Takes a task that is not running out of the line, so it cannot start meanwhile, and
    /// records `state` for it. When the store refuses, nothing changes: a queued task goes
    /// back where it was (in line, or held for the store) and the error is thrown.
    func recordStopped(_ id: UUID, as state: TaskState, was previous: TaskState) async throws {
        let origin = machine.stopBegins(id)
        do {
            try await store.setState(id, state)
        } catch {
            machine.stopEnds(id, recorded: false, was: previous, from: origin)
            if previous == .queued { admitAndStart() }
            throw error
        }
        machine.stopEnds(id, recorded: true, was: previous, from: origin)
        // A claim taken while the stop was being recorded ended with it in the store (the
        // state recorded clears the task's owner): none is held here any more.
        sharedQueue?.abandonClaim(id)
    }

    /// Forgets a task (cancelling it first if it is unfinished); with `deleteFile`, also
    /// deletes its finished file.
    public func remove(_ id: UUID, deleteFile: Bool = false) async throws {
        try await inTurn(id) { try await removeInTurn(id, deleteFile: deleteFile) }
    }

    private func removeInTurn(_ id: UUID, deleteFile: Bool) async throws {
        await refreshFromSharedStore(id)
        let state = try currentState(id)
        if TaskOperation.cancel.applies(to: state) { try await stop(id, .cancel) }
        let record = try await store.task(id: id)
        if deleteFile, state == .completed, let path = record?.destinationPath {
            _ = try? await uncancellable { try await FileIO.run { FileOps.remove(path) } }
        }
        try await store.delete(id)
        machine.forget(id)
    }

    /// The state an operation on `id` finds: the one known here, except for a run whose end
    /// the store has recorded (the finished file placed, in the same transaction) and which
    /// has not reached this manager yet — a pause then is refused as for a completed task,
    /// instead of answered as done. Nil for an unknown task.
    func operableState(_ id: UUID) async -> TaskState? {
        guard let state = machine.state(of: id) else { return nil }
        guard state == .running, let stored = try? await store.task(id: id)?.state,
            [.completed, .failed, .cancelled].contains(stored)
        else { return state }
        return stored
    }

    /// Pauses every task in `ids` that is queued or running.
    public func pause(_ ids: [UUID]) async throws {
        try await perform(.pause, on: ids)
    }

    /// Resumes every task in `ids` that is paused or failed, in the order given.
    public func resume(_ ids: [UUID]) async throws {
        try await perform(.resume, on: ids)
    }

    /// Cancels every unfinished task in `ids`.
    public func cancel(_ ids: [UUID]) async throws {
        try await perform(.cancel, on: ids)
    }

    /// Applies a user's operation to many tasks, in the order given.
    /// - Parameters:
    ///   - operation: what to do to each.
    ///   - ids: the tasks, in the order to apply it.
    ///   - strict: every id must name a task the operation applies to, or one already where
    ///     it takes tasks (``TaskOperation/isDone(in:)``: left as it is); checked for all of
    ///     them before any is touched, so a bad id changes nothing. Otherwise tasks it does
    ///     not apply to (or that are gone) are skipped.
    ///   - deleteFiles: for ``TaskOperation/remove``, also delete finished files.
    /// - Returns: the ids it was applied to.
    /// - Throws: ``HaulError/Code/invalidArgument`` (strict) for an unknown task or one in a
    ///   state the operation does not apply to.
    @discardableResult
    public func perform(
        _ operation: TaskOperation,
        on ids: [UUID],
        strict: Bool = false,
        deleteFiles: Bool = false
    ) async throws -> [UUID] {
        if strict {
            // Every id must name a task (else 404 for the first unknown), then be in a state it applies to.
            var states: [TaskState] = []
            for id in ids {
                _ = try currentState(id)
                states.append(await operableState(id) ?? .cancelled)
            }
            for (id, state) in zip(ids, states) {
                // One already where the operation takes it is left as it is (a second pause).
                guard operation.applies(to: state) || operation.isDone(in: state) else {
                    throw HaulError(
                        .invalidArgument,
                        "Cannot \(operation.rawValue) task \(id.shown): it is \(state.rawValue)"
                    )
                }
            }
        }
        var done: [UUID] = []
        // States change while earlier tasks stop: look each one up when its turn comes.
        for id in ids {
            let applied = try await inTurn(id) {
                guard let state = await operableState(id), operation.applies(to: state) else { return false }
                switch operation {
                case .pause: try await stop(id, .pause)
                case .resume: _ = try await resumeInTurn(id, priority: nil)
                case .cancel: try await stop(id, .cancel)
                case .remove: try await removeInTurn(id, deleteFile: deleteFiles)
                }
                return true
            }
            if applied { done.append(id) }
        }
        return done
    }

    /// Pauses every queued or running task; the queued ones first, so none starts meanwhile.
    public func pauseAll() async throws {
        try await pause(machine.waitingIDs)
        try await pause(machine.runningIDs)
    }

    /// Resumes every paused or failed task, oldest first.
    public func resumeAll() async throws {
        let ids = try await store.tasks(inStates: [.paused, .failed], background: background).map(\.id)
        try await resume(ids)
    }

    /// Cancels every unfinished task.
    public func cancelAll() async throws {
        try await cancel(machine.waitingIDs)
        try await cancel(machine.knownIDs)
    }
}
