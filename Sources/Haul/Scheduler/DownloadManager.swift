import Foundation
import Logging

/// Many downloads through one queue: a concurrency limit, a per-host cap, the ordering
/// rules of docs/design.md, pause/resume/cancel, restart recovery, and one stream of events.
///
/// ```swift
/// try await DownloadManager.withDownloadManager(
///     configuration: .init(store: .sqlite(at: path), maxConcurrentDownloads: 3)
/// ) { manager in
///     let task = try await manager.download(DownloadRequest(url: url, destination: .directory("/data")))
///     for await event in manager.events(for: task.id) { … }
/// }
/// ```
/// Tasks and their order live in the store: a manager opened on a store left by a crashed
/// process queues every task that was queued or running again, in its original order.
public actor DownloadManager {
    /// How a manager behaves.
    public struct Configuration: Sendable {
        /// Transport, store, checkpoints and retries, as for a ``Downloader``.
        public var downloader: Downloader.Configuration
        /// How many downloads run at once (any number of 1 or more).
        public var maxConcurrentDownloads: Int
        /// How many downloads run at once against one host.
        public var maxConnectionsPerHost: Int
        /// Whether ``run()`` first queues the store's unfinished tasks again (restart recovery).
        /// A one-off command that only runs the downloads it adds turns this off.
        public var recoversTasks: Bool
        /// Whether this manager is the background daemon's. It adds, lists and recovers
        /// only background tasks; any other manager only the rest, and it does not take over
        /// an unfinished task of the daemon.
        public var background: Bool

        public init(
            store: Downloader.StoreLocation = .default,
            maxConcurrentDownloads: Int = 3,
            maxConnectionsPerHost: Int = 8,
            recoversTasks: Bool = true,
            background: Bool = false,
            downloader: Downloader.Configuration = Downloader.Configuration()
        ) {
            self.downloader = downloader
            self.downloader.store = store
            self.maxConcurrentDownloads = maxConcurrentDownloads
            self.maxConnectionsPerHost = maxConnectionsPerHost
            self.recoversTasks = recoversTasks
            self.background = background
        }
    }

    private struct Active: Sendable {
        var control = TransferControl()
        var progress = ProgressBox()
        var limiter = RateLimiter()
    }

    private let downloader: Downloader
    private var scheduler: Scheduler
    private var machines: [UUID: TaskStateMachine] = [:]
    private var entries: [UUID: Scheduler.Entry] = [:]
    private var active: [UUID: Active] = [:]
    private var endWaiters: [UUID: [CheckedContinuation<Void, Never>]] = [:]
    private var lastProgress: [UUID: DownloadProgress] = [:]
    private var shuttingDown = false
    /// Tasks whose state in the store may not be the machine's: a write failed (a full
    /// disk, say). ``reconcile()`` writes them again, and reads show the machine's state.
    private var unrecorded: [UUID: String?] = [:]
    /// Tasks whose run ended because the store could not record it: they wait, queued but
    /// out of the scheduler, until the store accepts a write, then run again.
    private var heldForStore: Set<UUID> = []
    /// How many runs of a task in a row the store failed, while accepting other writes.
    private var storeFailures: [UUID: Int] = [:]
    /// The store refused the last write it was asked for: nothing new starts (it could not
    /// be recorded) until ``reconcile()`` gets a write through.
    private var storeRefusing = false
    private let hub = EventHub()
    private let starts: AsyncStream<(UUID, Active)>
    private let startSink: AsyncStream<(UUID, Active)>.Continuation
    private let logger: Logger
    private let recoversTasks: Bool
    private let background: Bool
    private var recovered = false

    /// The store the manager records into.
    public nonisolated var store: Store { downloader.store }

    /// Opens the store and loads its tasks. Call ``run()`` (or use
    /// ``withDownloadManager(configuration:_:)``) for anything to move.
    /// - Throws: ``HaulError/Code/invalidArgument`` for a limit below 1, or a store error.
    public init(configuration: Configuration) throws {
        try DownloadManager.validateLimit(configuration.maxConcurrentDownloads, "maxConcurrentDownloads")
        try DownloadManager.validateLimit(configuration.maxConnectionsPerHost, "maxConnectionsPerHost")
        self.downloader = try Downloader(configuration: configuration.downloader)
        self.scheduler = Scheduler(
            maxConcurrent: configuration.maxConcurrentDownloads,
            perHostLimit: configuration.maxConnectionsPerHost
        )
        (starts, startSink) = AsyncStream.makeStream()
        self.logger = configuration.downloader.logger
        self.recoversTasks = configuration.recoversTasks
        self.background = configuration.background
    }

    /// Runs `body` with a running manager; afterwards stops it cleanly: running downloads
    /// checkpoint and go back to the queue, to continue when a manager next opens the store.
    public static func withDownloadManager<Result>(
        configuration: Configuration,
        _ body: (DownloadManager) async throws -> Result
    ) async throws -> Result {
        var configuration = configuration
        configuration.downloader = try await configuration.downloader.openingStore()
        let manager = try DownloadManager(configuration: configuration)
        // Recover before `body` can add anything, so the two never interleave.
        try await manager.recoverIfNeeded()
        return try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await manager.run() }
            do {
                let result = try await body(manager)
                await manager.shutdown()
                try await group.waitForAll()
                return result
            } catch {
                await manager.shutdown()
                try? await group.waitForAll()
                throw error
            }
        }
    }

    // MARK: Running

    /// Recovers the store's unfinished tasks, then runs downloads until ``shutdown()``;
    /// then closes the HTTP client. Every manager must be run (``withDownloadManager(configuration:_:)``
    /// does it), once. Cancelling the task that runs it is a ``shutdown()``: running
    /// downloads checkpoint and go back to the queue rather than being cut off and failed.
    public func run() async throws {
        do {
            try await recoverIfNeeded()
        } catch {
            try? await downloader.shutdown()
            throw error
        }
        // Unstructured, so the caller's cancellation reaches the transfers only as a shutdown.
        let transfers = Task { await self.runTransfers() }
        await withTaskCancellationHandler {
            await transfers.value
        } onCancel: {
            Task { await self.shutdown() }
        }
        hub.finish()
        try await downloader.shutdown()
    }

    /// Runs each download the scheduler starts, until ``shutdown()`` and the last has ended.
    private func runTransfers() async {
        let starts = self.starts
        await withTaskGroup(of: Void.self) { outer in
            outer.addTask { await self.publishProgressUntilShutdown() }
            outer.addTask { await self.reconcileUntilShutdown() }
            await withDiscardingTaskGroup { group in
                for await (id, transfer) in starts {
                    group.addTask { await self.execute(id, transfer) }
                }
            }
            // Every transfer has ended: wake the progress publisher from its sleep, so that
            // stopping does not wait out its tick.
            outer.cancelAll()
        }
    }

    /// Stops starting downloads, sends the running ones back to the queue after a last
    /// checkpoint, and ends ``run()`` once they have stopped.
    public func shutdown() {
        guard !shuttingDown else { return }
        shuttingDown = true
        for (_, transfer) in active { transfer.control.request(.yield) }
        startSink.finish()
    }

    /// Restart recovery, once, when configured.
    private func recoverIfNeeded() async throws {
        guard recoversTasks, !recovered else { return }
        recovered = true
        try await recover()
    }

    /// Queues again every task that was queued, or running when its process died, in its
    /// original order; keeps paused and failed ones as they are, and knows the finished
    /// ones, so they can still be removed.
    private func recover() async throws {
        let records = try await store.tasks(inStates: TaskState.allCases, background: background)
        for record in records {
            // A task added meanwhile (when `run()` was called by hand) is already known.
            guard machines[record.id] == nil else { continue }
            let state = record.state
            if state == .completed || state == .cancelled {
                machines[record.id] = TaskStateMachine(state)
                continue
            }
            var machine = TaskStateMachine(state)
            if state == .running {
                _ = try? machine.handle(.recover)
                try await store.setState(record.id, .queued)
            }
            machines[record.id] = machine
            let entry = DownloadManager.entry(for: record)
            entries[record.id] = entry
            if machine.state == .queued { scheduler.enqueue(entry) }
        }
        admitAndStart()
    }

    private nonisolated func execute(_ id: UUID, _ transfer: Active) async {
        let (control, progress, limiter) = (transfer.control, transfer.progress, transfer.limiter)
        let outcome: Result<DownloadResult, HaulError>
        do {
            guard let (record, segments) = try await store.taskWithSegments(id) else {
                throw HaulError(.store, "Task \(id) vanished from the store")
            }
            let committed = segments.reduce(0) { $0 + ($1.committed - $1.start) }
            if committed > 0 { hub.publish(.resumed(id: id, offset: committed, expectedTotal: record.totalLength)) }
            limiter.setInitialRate(record.rateLimit)
            var capped = downloader.environment
            // One download never opens more connections than the per-host cap allows.
            capped.connectionCap = await limits.maxConnectionsPerHost
            let environment = capped
            outcome = await withTaskGroup(of: Result<DownloadResult, HaulError>?.self) { group in
                group.addTask {
                    let transfer = Transfer(
                        task: record,
                        segments: segments,
                        environment: environment,
                        progress: progress,
                        control: control,
                        limiter: limiter
                    )
                    do {
                        return .success(try await transfer.run())
                    } catch {
                        return .failure(error as? HaulError ?? HaulError(.connection, "\(error)"))
                    }
                }
                group.addTask {
                    await control.waitForStop()
                    return nil
                }
                var result: Result<DownloadResult, HaulError>?
                while let next = await group.next() {
                    // A stop request (nil) or the end of the transfer: either way stop the other.
                    group.cancelAll()
                    if let next { result = next }
                }
                return result ?? .failure(HaulError(.cancelled, "Stopped"))
            }
        } catch {
            outcome = .failure(error as? HaulError ?? HaulError(.store, "\(error)"))
        }
        await transferEnded(id, outcome: outcome, stop: control.requested)
    }

    private func transferEnded(_ id: UUID, outcome: Result<DownloadResult, HaulError>, stop: StopReason?) {
        active[id] = nil
        lastProgress[id] = nil
        switch outcome {
        case .success(let result):
            storeFailures[id] = nil
            scheduler.remove(id)
            move(id, .complete)
            hub.publish(.completed(id: id, result: result))
        case .failure(let error) where error.code == .store:
            storeFailed(id, error: error, stop: stop)
        case .failure(let error) where error.code == .paused && stop == .yield:
            // The scheduler already moved it back to waiting (or, during shutdown, it stays queued).
            move(id, .yield)
        case .failure(let error) where error.code == .paused:
            scheduler.remove(id)
            move(id, .pause)
        case .failure(let error) where error.code == .cancelled:
            scheduler.remove(id)
            move(id, .cancel)
        case .failure(let error):
            scheduler.remove(id)
            move(id, .fail)
            hub.publish(.failed(id: id, error: error))
        }
        for waiter in endWaiters.removeValue(forKey: id) ?? [] { waiter.resume() }
        if scheduler.isRunning(id), machines[id]?.state == .queued {
            // Re-admitted while it was still stopping (the limit went down, then up again).
            start(id)
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
    private func storeFailed(_ id: UUID, error: HaulError, stop: StopReason?) {
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
            let failures = storeFailures[id, default: 0] + 1
            storeFailures[id] = failures
            scheduler.remove(id)
            guard failures < DownloadManager.storeFailureLimit else {
                storeFailures[id] = nil
                move(id, .fail)
                unrecorded[id] = .some(error.description)
                hub.publish(.failed(id: id, error: error))
                return
            }
            logger.warning(
                "the store could not record this download; it runs again once the store can be written",
                metadata: ["haul.task": "\(id)", "error": "\(error)"]
            )
            move(id, .yield)
            heldForStore.insert(id)
        }
        if unrecorded[id] == nil { unrecorded[id] = .some(nil) }
    }

    private nonisolated func reconcileUntilShutdown() async {
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
    private func reconcile() async -> Bool {
        guard !shuttingDown else { return false }
        guard storeRefusing || !unrecorded.isEmpty || !heldForStore.isEmpty else { return true }  // Nothing owed.
        for (id, message) in unrecorded {
            guard let state = machines[id]?.state else {
                unrecorded[id] = nil
                continue
            }
            do {
                try await store.setState(id, state, error: state == .failed ? message : nil)
                storeRefusing = false
            } catch {
                break  // Still refused: try again at the next tick.
            }
            // Changed meanwhile: its own write, or the next tick, records the new state.
            if machines[id]?.state == state, unrecorded[id] == message { unrecorded[id] = nil }
        }
        // Nothing left to write (what failed was removed, say): the next start finds out.
        if unrecorded.isEmpty { storeRefusing = false }
        for id in heldForStore where unrecorded[id] == nil {
            heldForStore.remove(id)
            guard machines[id]?.state == .queued, let entry = entries[id] else { continue }
            scheduler.enqueue(entry)
        }
        admitAndStart()
        return true
    }

    /// A task as its store record says, with the state this manager knows when the store missed it.
    private func overlaid(_ info: DownloadInfo) -> DownloadInfo {
        guard let message = unrecorded[info.id], let state = machines[info.id]?.state else { return info }
        var info = info
        info.state = state
        info.errorMessage = state == .failed ? message : nil
        return info
    }

    private func admitAndStart() {
        guard !shuttingDown, !storeRefusing else { return }
        for id in scheduler.admit() where active[id] == nil {
            start(id)
        }
    }

    private func start(_ id: UUID) {
        guard !shuttingDown else { return }
        move(id, .start)
        let transfer = Active()
        active[id] = transfer
        startSink.yield((id, transfer))
    }

    /// Applies a state-machine event and publishes the change.
    private func move(_ id: UUID, _ event: TaskStateMachine.Event) {
        var machine = machines[id] ?? TaskStateMachine()
        let from = machine.state
        do {
            try machine.handle(event)
        } catch {
            logger.error("illegal transition", metadata: ["haul.task": "\(id)", "error": "\(error)"])
            return
        }
        machines[id] = machine
        hub.publish(.stateChanged(id: id, from: from, to: machine.state))
    }

    private nonisolated func publishProgressUntilShutdown() async {
        while await publishProgress() {
            do {
                try await Task.sleep(for: .milliseconds(100))
            } catch {
                return  // Woken because every transfer has ended.
            }
        }
    }

    /// Publishes what changed since the last tick; false once the manager is shutting down.
    private func publishProgress() -> Bool {
        guard !shuttingDown || !active.isEmpty else { return false }
        for (id, transfer) in active {
            let progress = transfer.progress.snapshot()
            if lastProgress[id] != progress {
                lastProgress[id] = progress
                hub.publish(.progress(id: id, progress))
            }
        }
        return true
    }

    private func waitForEnd(_ id: UUID) async {
        guard active[id] != nil else { return }
        await withCheckedContinuation { endWaiters[id, default: []].append($0) }
    }

    private static func entry(for record: TaskRecord) -> Scheduler.Entry {
        let url = record.url
        let host = "\(url.host?.lowercased() ?? ""):\(url.port ?? (url.scheme == "https" ? 443 : 80))"
        return Scheduler.Entry(id: record.id, host: host, priority: record.priority, queueOrder: record.queueOrder)
    }

    /// Rejects a concurrency limit below 1.
    public static func validateLimit(_ value: Int, _ name: String) throws {
        guard limits.contains(value) else {
            throw HaulError(.invalidArgument, "\(name) must be from \(limits.lowerBound) to \(limits.upperBound), not \(value)")
        }
    }

    /// What the concurrency limits (downloads at once, connections per host) can be.
    public static let limits = 1...1_000
}

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
    /// - Parameter priority: higher starts sooner than older tasks of lower priority.
    /// - Returns: the task as it stands now (queued, running, or already completed).
    /// - Throws: ``HaulError`` for a bad URL or an unusable destination.
    public func download(_ request: DownloadRequest, priority: Int = 0) async throws -> DownloadInfo {
        try await download([request], priority: priority)[0]
    }

    /// Queues many downloads, in order, as ``download(_:priority:)`` does each: all are
    /// checked, then found or recorded in one transaction, so a bad one adds none.
    /// - Returns: the tasks as they stand now, in the order of `requests`.
    public func download(_ requests: [DownloadRequest], priority: Int = 0) async throws -> [DownloadInfo] {
        try DownloadManager.validatePriority(priority)
        let prepared = try await downloader.prepare(requests, background: background, priority: priority)
        var infos: [DownloadInfo] = []
        infos.reserveCapacity(prepared.count)
        for item in prepared {
            if item.isNew {
                infos.append(enqueueNew(item.record))
            } else {
                infos.append(try await reAdded(item.record, priority: priority))
            }
        }
        admitAndStart()
        return infos
    }

    /// A task just recorded: it waits for its turn, announced; nothing to read back.
    private func enqueueNew(_ record: TaskRecord) -> DownloadInfo {
        let id = record.id
        let info = DownloadInfo(
            id: id,
            url: record.url,
            path: record.destinationPath,
            directory: record.directory,
            state: .queued,
            priority: record.priority,
            bytesCommitted: 0,
            totalBytes: record.totalLength,
            errorMessage: nil,
            session: record.session,
            rateLimit: record.rateLimit,
            connections: record.connections
        )
        if let state = machines[id]?.state {
            // Another add found it meanwhile (while this one awaited an earlier re-add) and queued it.
            var current = info
            current.state = state
            return current
        }
        machines[id] = TaskStateMachine(.queued)
        entries[id] = DownloadManager.entry(for: record)
        hub.publish(.added(info))
        scheduler.enqueue(entries[id]!)
        return info
    }

    /// A download that was already in the store: it goes on, runs again, or stays completed.
    private func reAdded(_ record: TaskRecord, priority: Int) async throws -> DownloadInfo {
        var record = record
        let id = record.id
        if let machine = machines[id] {
            switch machine.state {
            case .queued, .running: return try await info(id)
            case .paused, .failed: return try await resume(id, priority: priority)
            case .completed, .cancelled: break
            }
        }
        if record.priority != priority {
            try await store.setPriority(id, priority)
            record.priority = priority
        }
        if record.state != .completed {
            record.queueOrder = try await store.requeue(id, state: .queued)
        }
        // A completed task keeps its record: its transfer finds the verified file in place
        // and completes without a request (or fetches it again if the file is gone).
        return try await enqueueAdded(record, isNew: false)
    }

    /// Queues a download from resume data produced by ``pause(_:)``, a failure, or another
    /// process; it continues from the committed bytes when its part file is still there.
    /// - Throws: ``HaulError`` when the task is already queued or running here, or the
    ///   resume data does not describe a usable download.
    public func download(resumingFrom resumeData: ResumeData, priority: Int = 0) async throws -> DownloadInfo {
        if let state = machines[resumeData.taskID]?.state, state == .queued || state == .running {
            throw HaulError(.invalidArgument, "Task \(resumeData.taskID) is already \(state.rawValue)")
        }
        var record = try await downloader.prepare(resumingFrom: resumeData, background: background).record
        record.queueOrder = try await store.requeue(record.id, state: .queued)
        if record.priority != priority {
            try await store.setPriority(record.id, priority)
            record.priority = priority
        }
        return try await enqueueAdded(record, isNew: false)
    }

    /// Makes a freshly added (or re-added) task wait for its turn and announces it.
    /// - Parameter isNew: a task just inserted has nothing committed, and needs no query to say so.
    private func enqueueAdded(_ record: TaskRecord, isNew: Bool) async throws -> DownloadInfo {
        let id = record.id
        let committed = isNew ? 0 : try await info(id).bytesCommitted
        if let state = machines[id]?.state, state == .queued || state == .running {
            return try await info(id)  // Another add of the same download got here first.
        }
        machines[id] = TaskStateMachine(.queued)
        entries[id] = DownloadManager.entry(for: record)
        let url = record.url
        hub.publish(
            .added(
                DownloadInfo(
                    id: id,
                    url: url,
                    path: record.destinationPath,
                    directory: record.directory,
                    state: .queued,
                    priority: record.priority,
                    bytesCommitted: committed,
                    totalBytes: record.totalLength,
                    errorMessage: nil,
                    session: record.session
                )
            )
        )
        scheduler.enqueue(entries[id]!)
        admitAndStart()
        return try await info(id)
    }

    /// Pauses a task, keeping its data. A running one checkpoints first.
    /// - Returns: resume data that continues it, here or in another process.
    /// - Throws: ``HaulError/Code/invalidArgument`` for an unknown task or one that is not queued or running.
    @discardableResult
    public func pause(_ id: UUID) async throws -> ResumeData {
        let state = try currentState(id)
        switch state {
        case .queued:
            try await recordStopped(id, as: .paused, was: state)
            move(id, .pause)
        case .running:
            active[id]?.control.request(.pause)
            await waitForEnd(id)
        default:
            throw HaulError(.invalidArgument, "Cannot pause task \(id): it is \(state.rawValue)")
        }
        return try await resumeData(id)
    }

    /// Resumes a paused or failed task: it queues anew at the back, unless given a priority.
    @discardableResult
    public func resume(_ id: UUID, priority: Int? = nil) async throws -> DownloadInfo {
        if let priority { try DownloadManager.validatePriority(priority) }
        let state = try currentState(id)
        guard TaskStateMachine.next(from: state, on: .resume) != nil else {
            throw HaulError(.invalidArgument, "Cannot resume task \(id): it is \(state.rawValue)")
        }
        if let priority { try await store.setPriority(id, priority) }
        let order = try await store.requeue(id, state: .queued)
        unrecorded[id] = nil
        storeFailures[id] = nil
        move(id, .resume)
        var entry = entries[id] ?? Scheduler.Entry(id: id, host: "", priority: 0, queueOrder: order)
        entry.queueOrder = order
        if let priority { entry.priority = priority }
        entries[id] = entry
        scheduler.enqueue(entry)
        admitAndStart()
        return try await info(id)
    }

    /// Cancels a task and deletes its partial data. The task stays listed as cancelled.
    public func cancel(_ id: UUID) async throws {
        let state = try currentState(id)
        switch state {
        case .running:
            active[id]?.control.request(.cancel)
            await waitForEnd(id)
        case .queued, .paused, .failed:
            try await recordStopped(id, as: .cancelled, was: state)
            move(id, .cancel)
            // Cancelled is recorded: its partial data goes; a record of it left behind is harmless.
            if let record = try? await store.task(id: id), let path = record.partPath {
                PartFile.remove(at: path, owner: id, identity: record.partIdentity)
                try? await store.setPart(id, path: nil, identity: nil)
            }
        case .completed, .cancelled:
            throw HaulError(.invalidArgument, "Cannot cancel task \(id): it is \(state.rawValue)")
        }
    }

    /// Takes a task that is not running out of the line, so it cannot start meanwhile, and
    /// records `state` for it. When the store refuses, nothing changes: a queued task goes
    /// back where it was (in line, or held for the store) and the error is thrown.
    private func recordStopped(_ id: UUID, as state: TaskState, was previous: TaskState) async throws {
        scheduler.remove(id)
        let held = heldForStore.remove(id) != nil
        do {
            try await store.setState(id, state)
        } catch {
            if previous == .queued {
                if held { heldForStore.insert(id) } else if let entry = entries[id] { scheduler.enqueue(entry) }
                admitAndStart()
            }
            throw error
        }
        unrecorded[id] = nil
    }

    /// Forgets a task (cancelling it first if it is unfinished); with `deleteFile`, also
    /// deletes its finished file.
    public func remove(_ id: UUID, deleteFile: Bool = false) async throws {
        let state = try currentState(id)
        if TaskOperation.cancel.applies(to: state) { try await cancel(id) }
        let record = try await store.task(id: id)
        if deleteFile, state == .completed, let path = record?.destinationPath { FileOps.remove(path) }
        try await store.delete(id)
        machines[id] = nil
        entries[id] = nil
        unrecorded[id] = nil
        heldForStore.remove(id)
        storeFailures[id] = nil
        scheduler.remove(id)
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
    ///   - strict: every id must name a task the operation applies to; checked for all of
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
            let states = try ids.map { try currentState($0) }
            for (id, state) in zip(ids, states) {
                guard operation.applies(to: state) else {
                    throw HaulError(
                        .invalidArgument,
                        "Cannot \(operation.rawValue) task \(id): it is \(state.rawValue)"
                    )
                }
            }
        }
        var done: [UUID] = []
        // States change while earlier tasks stop: look each one up when its turn comes.
        for id in ids {
            guard let state = machines[id]?.state, operation.applies(to: state) else { continue }
            switch operation {
            case .pause: try await pause(id)
            case .resume: try await resume(id)
            case .cancel: try await cancel(id)
            case .remove: try await remove(id, deleteFile: deleteFiles)
            }
            done.append(id)
        }
        return done
    }

    /// Pauses every queued or running task; the queued ones first, so none starts meanwhile.
    public func pauseAll() async throws {
        try await pause(scheduler.waitingIDs)
        try await pause(scheduler.runningIDs)
    }

    /// Resumes every paused or failed task, oldest first.
    public func resumeAll() async throws {
        let ids = try await store.tasks(inStates: [.paused, .failed], background: background).map(\.id)
        try await resume(ids)
    }

    /// Cancels every unfinished task.
    public func cancelAll() async throws {
        try await cancel(scheduler.waitingIDs)
        try await cancel(Array(machines.keys))
    }

    /// Changes how many downloads run at once. Lowering it sends the most recently started
    /// back to waiting (keeping their data and their place); raising it starts the oldest waiting.
    public func setMaxConcurrentDownloads(_ limit: Int) throws {
        try DownloadManager.validateLimit(limit, "maxConcurrentDownloads")
        for id in scheduler.setMaxConcurrent(limit) { active[id]?.control.request(.yield) }
        admitAndStart()
    }

    /// Changes how many downloads run at once against one host, like ``setMaxConcurrentDownloads(_:)``.
    public func setMaxConnectionsPerHost(_ limit: Int) throws {
        try DownloadManager.validateLimit(limit, "maxConnectionsPerHost")
        for id in scheduler.setPerHostLimit(limit) { active[id]?.control.request(.yield) }
        admitAndStart()
    }

    /// Changes the rate limit of tasks (bytes per second; nil for none): recorded for their
    /// next runs and applied at once to those running.
    /// - Throws: ``HaulError/Code/invalidArgument`` for an unknown task or a rate below 1.
    public func setRateLimit(_ bytesPerSecond: Int64?, for ids: [UUID]) async throws {
        try DownloadRequest.validateRateLimit(bytesPerSecond)
        for id in ids where machines[id] == nil {
            throw HaulError(.notFound, "No task \(id)")
        }
        try await store.setRateLimit(bytesPerSecond, for: ids)
        for id in ids { active[id]?.limiter.setRate(bytesPerSecond) }
    }

    /// Changes the limit on all downloads together (bytes per second; nil for none), at once.
    public func setOverallRateLimit(_ bytesPerSecond: Int64?) throws {
        try DownloadRequest.validateRateLimit(bytesPerSecond)
        downloader.setOverallRateLimit(bytesPerSecond)
    }

    /// The limit on all downloads together now; nil for none.
    public nonisolated var overallRateLimit: Int64? { downloader.overallRateLimit }

    /// The limits in force.
    public var limits: (maxConcurrentDownloads: Int, maxConnectionsPerHost: Int) {
        (scheduler.maxConcurrent, scheduler.perHostLimit)
    }

    // MARK: Looking

    /// Every task of this manager's kind (background or not) in the store, in queue order;
    /// with `session`, only that session's.
    public func tasks(session: String? = nil) async throws -> [DownloadInfo] {
        let infos = try await store.infos(background: background, session: session)
        return unrecorded.isEmpty ? infos : infos.map(overlaid)
    }

    /// One task.
    /// - Throws: ``HaulError/Code/notFound`` when there is no such task.
    public func info(_ id: UUID) async throws -> DownloadInfo {
        guard let info = try await store.infos(ids: [id]).first else {
            throw HaulError(.notFound, "No task \(id)")
        }
        return overlaid(info)
    }

    /// The manager as a whole: how many tasks run and wait, and their combined speed.
    public func overallProgress() -> ManagerProgress {
        let speeds = active.values.map { $0.progress.snapshot().bytesPerSecond }
        return ManagerProgress(
            running: scheduler.runningIDs.count,
            waiting: scheduler.waitingIDs.count,
            bytesPerSecond: speeds.reduce(0, +)
        )
    }

    /// Live progress of a running task, nil for others.
    public func progress(of id: UUID) -> DownloadProgress? {
        active[id]?.progress.snapshot()
    }

    /// The ids of running tasks, in the order they started.
    public var runningTaskIDs: [UUID] { scheduler.runningIDs }

    /// The ids of waiting tasks, next to start first.
    public var waitingTaskIDs: [UUID] { scheduler.waitingIDs }

    /// All events from now on.
    public nonisolated func events() -> DownloadEvents { hub.subscribe() }

    /// The events of one task from now on.
    public nonisolated func events(for id: UUID) -> DownloadEvents { hub.subscribe(taskID: id) }

    private func currentState(_ id: UUID) throws -> TaskState {
        guard let machine = machines[id] else { throw HaulError(.notFound, "No task \(id)") }
        return machine.state
    }

    private func resumeData(_ id: UUID) async throws -> ResumeData {
        guard let record = try await store.task(id: id) else { throw HaulError(.notFound, "No task \(id)") }
        return ResumeData(record: record, segments: try await store.segments(of: id))
    }
}

/// What a user can do to tasks, one at a time or many at once (``DownloadManager/perform(_:on:strict:deleteFiles:)``).
public enum TaskOperation: String, Sendable, CaseIterable {
    /// Stop, keeping the data: queued or running tasks.
    case pause
    /// Queue again: paused or failed tasks.
    case resume
    /// Stop and delete the partial data: unfinished tasks.
    case cancel
    /// Forget the task (cancelling it first when unfinished): any task.
    case remove

    /// Whether the operation applies to a task in `state`, by the state machine's rules.
    public func applies(to state: TaskState) -> Bool {
        switch self {
        case .pause: return TaskStateMachine.next(from: state, on: .pause) != nil
        case .resume: return TaskStateMachine.next(from: state, on: .resume) != nil
        case .cancel: return TaskStateMachine.next(from: state, on: .cancel) != nil
        case .remove: return true
        }
    }
}

/// A snapshot of a whole ``DownloadManager``.
public struct ManagerProgress: Sendable, Equatable {
    /// Tasks transferring now.
    public var running: Int
    /// Tasks waiting for a slot.
    public var waiting: Int
    /// Combined speed of the running tasks, each averaged over at least a second.
    public var bytesPerSecond: Double
}
