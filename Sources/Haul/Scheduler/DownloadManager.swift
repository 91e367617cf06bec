import Foundation
import Logging
import Synchronization

/// Many downloads through one queue: a concurrency limit, a per-host cap, the ordering
/// rules of docs/architecture.md, pause/resume/cancel, restart recovery, and one stream of events.
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
///
/// The manager is split by concern: this file holds its state and its life (run, shutdown,
/// starting transfers); DownloadManager+Operations the user's operations and limits,
/// DownloadManager+Execution running one transfer and handling its end,
/// DownloadManager+Recovery restart recovery and the store's failures,
/// DownloadManager+Progress live progress, listings and events.
public actor DownloadManager {
    /// How a manager behaves.
    public struct Configuration: Sendable {
        /// Transport, store, checkpoints and retries, as for a ``Downloader``.
        public var downloader: Downloader.Configuration
        /// How many downloads run at once (any number of 1 or more).
        public var maxConcurrentDownloads: Int
        /// How many downloads run at once against one host.
        public var maxDownloadsPerHost: Int
        /// How many connections the downloads to one host hold at once, together
        /// (``HostConnections``: every running download holds one before any holds a second).
        public var maxConnectionsPerHost: Int = 16
        /// Whether ``run()`` first queues the store's unfinished tasks again (restart recovery).
        /// A one-off command that only runs the downloads it adds turns this off.
        public var recoversTasks: Bool
        /// Whether this manager is the background daemon's. It adds, lists and recovers
        /// only background tasks; any other manager only the rest, and it does not take over
        /// an unfinished task of the daemon.
        public var background: Bool
        /// Whether a failure that may pass sends the task to wait and try again
        /// (``TaskState/retrying``) rather than failing it; nil fails it.
        public var keepsTrying: KeepTrying?
        /// Whether the manager watches the network (``NetworkMonitor``): a task whose server
        /// has no usable route waits in ``TaskState/waitingForNetwork`` instead of failing or
        /// spending retries, and queues again when the route is back.
        public var watchesNetwork = false
        /// How long a task may wait for the network before it fails; nil for as long as it takes.
        public var networkWaitLimit: Duration?
        /// Which networks downloads may use (metered ones); changed live with
        /// ``DownloadManager/setNetworkPolicy(_:)``.
        public var networkPolicy = NetworkPolicy()
        /// Programs run when any download ends (`haul daemon --on-complete/--on-error`); a
        /// task's own hooks win over these.
        public var hooks = Hooks.none
        /// The longest a hook may run before it is stopped.
        public var hookTimeout: Duration = .seconds(600)
        /// A queue this (background) manager shares with others, each on its own machine: its
        /// tasks then run here only under its claims (``SharedQueue``). Its tasks live in the
        /// store the queue belongs to, which ``store`` must name.
        package var sharedQueue: (any SharedQueue)?

        /// Where the store lives: the downloader's.
        public var store: Downloader.StoreLocation {
            get { downloader.store }
            set { downloader.store = newValue }
        }

        /// A manager over the store at `store`, every other downloader setting its default.
        public init(
            store: Downloader.StoreLocation = .default,
            maxConcurrentDownloads: Int = 3,
            maxDownloadsPerHost: Int = 8,
            recoversTasks: Bool = true,
            background: Bool = false
        ) {
            self.init(
                downloader: Downloader.Configuration(store: store),
                maxConcurrentDownloads: maxConcurrentDownloads,
                maxDownloadsPerHost: maxDownloadsPerHost,
                recoversTasks: recoversTasks,
                background: background
            )
        }

        /// A manager whose downloads run as `downloader` says, on its store.
        public init(
            downloader: Downloader.Configuration,
            maxConcurrentDownloads: Int = 3,
            maxDownloadsPerHost: Int = 8,
            recoversTasks: Bool = true,
            background: Bool = false
        ) {
            self.downloader = downloader
            self.maxConcurrentDownloads = maxConcurrentDownloads
            self.maxDownloadsPerHost = maxDownloadsPerHost
            self.recoversTasks = recoversTasks
            self.background = background
        }
    }

    let downloader: Downloader
    /// The time the manager waits by (its downloader's clock): retry-later timers.
    var timeline: Timeline { downloader.timeline }
    /// Every task this manager knows, its place in line and its runs: the one place a
    /// task's state is kept in memory (ManagerMachine.swift).
    var machine: ManagerMachine
    /// What exists only while a task's transfer runs: its handles, who waits for its end.
    var runs: [UUID: RunningTransfer] = [:]
    /// The waits of retrying tasks (their next try) and of tasks waiting for the network
    /// (their limit).
    var timers: [UUID: Task<Void, Never>] = [:]
    /// Whose turn it is to operate on each task (OperationTurns.swift).
    var turns = OperationTurns()
    var shuttingDown: Bool { machine.shuttingDown }
    /// What the last ``DownloadEvent/networkChanged(_:)`` said (or the network when watching began).
    var lastNetworkStatus: NetworkStatus?
    let hub = EventHub()
    /// Hooks to run: ``ended(_:_:)`` asks, ``runHooks()`` runs.
    let hookRequests: AsyncStream<(UUID, Ending)>
    let hookSink: AsyncStream<(UUID, Ending)>.Continuation
    /// The runs to start, each with what its run reads first when that was read already.
    private let starts: AsyncStream<(UUID, TransferHandles, (TaskRecord, [SegmentRecord])?)>
    private let startSink: AsyncStream<(UUID, TransferHandles, (TaskRecord, [SegmentRecord])?)>.Continuation
    /// What the runs that start at once read first, known already: tasks just claimed in a
    /// shared queue, as read with their claims (``claimWaitingTasks()``), or just recorded by
    /// an add (``download(_:priority:paused:)``); empty between those.
    var startReads: [UUID: (TaskRecord, [SegmentRecord])] = [:]
    /// The tasks an add here is recording and has not announced yet (``download(_:priority:paused:)``),
    /// and whether a claim found one of them and left it (the add then has the queue claimed again).
    var adding: Set<UUID> = []
    var claimLeftAddedTasks = false
    let logger: Logger
    private let recoversTasks: Bool
    let background: Bool
    /// How failures that may pass are tried again; nil: they fail.
    var keepTrying: KeepTrying?
    /// Whether tasks wait for the network (``Configuration/watchesNetwork``).
    let watchesNetwork: Bool
    let networkWaitLimit: Duration?
    let policy: PolicyBox
    /// The routes downloads start on, while the network is watched (DownloadManager+Network.swift).
    let routes = RouteCache()
    /// Programs run when any download ends, unless the task has its own.
    let hooks: Hooks
    let hookTimeout: Duration
    private var recovered = false

    /// The store the manager records into.
    package nonisolated var store: any TaskStore { downloader.store }
    /// The queue this manager shares with others (``Configuration/sharedQueue``): tasks run
    /// here only while it holds their claims (DownloadManager+SharedQueue.swift).
    let sharedQueue: (any SharedQueue)?
    /// The connections per host this manager's downloads share.
    nonisolated let hostConnections: HostConnections
    /// Rung when a run here ends, or the shared queue says work waits: the next claim is
    /// taken at once.
    nonisolated let claimDoorbell = Doorbell()
    /// The limit on all downloads together: this manager's own, and its part of the shared
    /// queue's (nil: none); the lower of the two holds.
    let rateLimits: Mutex<(own: Int64?, shared: Int64?)>

    /// Opens the store and loads its known. Call ``run()`` (or use
    /// ``withDownloadManager(configuration:_:)``) for anything to move.
    /// - Throws: ``HaulError/Code/invalidArgument`` for a limit below 1, or a store error.
    public init(configuration: Configuration) throws {
        try DownloadManager.validateLimit(configuration.maxConcurrentDownloads, "maxConcurrentDownloads")
        try DownloadManager.validateLimit(configuration.maxDownloadsPerHost, "maxDownloadsPerHost")
        try DownloadManager.validateLimit(configuration.maxConnectionsPerHost, "maxConnectionsPerHost")
        self.downloader = try Downloader(configuration: configuration.downloader)
        self.machine = ManagerMachine(
            maxConcurrent: configuration.maxConcurrentDownloads,
            perHostLimit: configuration.maxDownloadsPerHost,
            sharesQueue: configuration.sharedQueue != nil
        )
        (starts, startSink) = AsyncStream.makeStream()
        (hookRequests, hookSink) = AsyncStream.makeStream()
        self.logger = configuration.downloader.logger
        self.recoversTasks = configuration.recoversTasks
        self.background = configuration.background
        self.keepTrying = configuration.keepsTrying
        self.watchesNetwork = configuration.watchesNetwork
        self.networkWaitLimit = configuration.networkWaitLimit
        self.policy = PolicyBox(configuration.networkPolicy)
        self.hooks = configuration.hooks
        self.hookTimeout = configuration.hookTimeout
        self.sharedQueue = configuration.background ? configuration.sharedQueue : nil
        self.hostConnections = HostConnections(cap: configuration.maxConnectionsPerHost)
        self.rateLimits = Mutex((configuration.downloader.overallRateLimit, nil))
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
        // With a shared queue: what was yielded is back in it; any claim still held goes now.
        await giveBackClaims()
        hub.finish()
        try await downloader.shutdown()
    }

    /// Runs each download the scheduler starts, until ``shutdown()`` and the last has ended.
    private func runTransfers() async {
        let starts = self.starts
        // Not in the group below, whose end cancels its tasks: a hook runs to its end.
        async let hooksDone: Void = runHooks()
        await withTaskGroup(of: Void.self) { outer in
            outer.addTask { await self.publishProgressUntilShutdown() }
            outer.addTask { await self.reconcileUntilShutdown() }
            outer.addTask { await self.watchNetworkUntilShutdown() }
            outer.addTask { await self.claimUntilShutdown() }
            await withDiscardingTaskGroup { group in
                for await (id, transfer, read) in starts {
                    group.addTask { await self.execute(id, transfer, read: read) }
                }
            }
            // Every transfer has ended: wake the progress publisher from its sleep, so that
            // stopping does not wait out its tick.
            outer.cancelAll()
        }
        // Every transfer has ended, and so has every run that could ask for a hook.
        hookSink.finish()
        await hooksDone
    }

    /// Stops starting downloads, sends the running ones back to the queue after a last
    /// checkpoint, and ends ``run()`` once they have stopped.
    public func shutdown() {
        guard !shuttingDown else { return }
        machine.shuttingDown = true
        for id in machine.running { runs[id]?.handles.control.request(.yield) }
        // Retrying tasks stay so in the store; the next manager arms their tries again.
        for id in Array(timers.keys) { disarmRetry(id) }
        startSink.finish()
    }

    /// Restart recovery, once, when configured.
    func recoverIfNeeded() async throws {
        guard recoversTasks, !recovered else { return }
        recovered = true
        try await recover()
    }

    /// Starts what the scheduler admits, unless stopping or the store refuses writes.
    func admitAndStart() {
        if let sharedQueue {
            // A task runs here only under this manager's claim. One without waits in the
            // shared queue, where the next claim taken (here or elsewhere) finds it.
            perform(machine.admit { sharedQueue.holdsClaim($0) })
        } else {
            perform(machine.admit())
        }
    }

    /// Performs what the machine said, in order.
    /// - Parameters:
    ///   - ending: how the task whose run is over for good ended (``ManagerMachine/Action/end(_:)``).
    ///   - mayHaveHooks: false when that task is known to have no hooks of its own.
    func perform(_ actions: [ManagerAction], ending: Ending? = nil, mayHaveHooks: Bool = true) {
        for action in actions {
            switch action {
            case .start(let id):
                let transfer = TransferHandles(clock: downloader.timeline.clock)
                runs[id] = RunningTransfer(handles: transfer)
                startSink.yield((id, transfer, startReads.removeValue(forKey: id)))
            case .stop(let id, let reason):
                runs[id]?.handles.control.request(reason)
            case .publish(let id, let from, let to, let reason):
                hub.publish(.stateChanged(id: id, from: from, to: to, reason: reason))
            case .end(let id):
                guard let ending else { continue }
                ended(id, ending, mayHaveHooks: mayHaveHooks)
            case .illegal(let id, let error):
                logger.error("illegal transition", metadata: ["haul.task": "\(id)", "error": "\(error)"])
            }
        }
    }

    /// Applies a state-machine event and publishes the change, with `reason` or the one the
    /// event gives.
    func move(_ id: UUID, _ event: TaskStateMachine.Event, reason: StateChangeReason? = nil) {
        perform(machine.move(id, event, reason: reason))
    }

    /// Runs `body` as the one user's operation on task `id` under way, after those that
    /// came first (``OperationTurns``).
    func inTurn<T>(_ id: UUID, _ body: () async throws -> T) async throws -> T {
        if !turns.take(id) {
            await withCheckedContinuation { turns.wait(id, $0) }
        }
        defer { turns.pass(id) }
        return try await body()
    }

    /// Waits until the running transfer of a task has ended and its end was handled.
    func waitForEnd(_ id: UUID) async {
        guard machine.isRunning(id), let run = runs[id] else { return }
        await withCheckedContinuation { run.endWaiters.append($0) }
    }

    /// The state of a task this manager knows.
    /// - Throws: ``HaulError/Code/notFound`` for a task it does not know.
    func currentState(_ id: UUID) throws -> TaskState {
        guard let state = machine.state(of: id) else { throw HaulError(.notFound, "No task \(id.shown)") }
        return state
    }

    static func entry(for record: TaskRecord) -> Scheduler.Entry {
        var entry = Scheduler.Entry(
            id: record.id,
            host: hostKey(record.url),
            priority: record.priority,
            queueOrder: record.queueOrder
        )
        entry.allowsMetered = record.allowsMetered
        return entry
    }

    /// What the per-host cap counts a URL under: its host, lower-cased, and port.
    package static func hostKey(_ url: URL) -> String {
        "\(url.host?.lowercased() ?? ""):\(url.port ?? (url.scheme == "https" ? 443 : 80))"
    }

    /// Rejects a concurrency limit below 1.
    public static func validateLimit(_ value: Int, _ name: String) throws {
        guard limits.contains(value) else {
            throw HaulError(
                .invalidArgument,
                "\(name) must be from \(limits.lowerBound) to \(limits.upperBound), not \(value)"
            )
        }
    }

    /// What the concurrency limits (downloads at once, downloads and connections per host) can be.
    public static let limits = 1...1_000
}
