import Foundation
import Haul
import HaulWire
import HaulWireMapping
import Logging
import Synchronization

/// What the API's handlers work on: the manager, its event log, and the daemon's facts.
final class DaemonCore: Sendable {
    let manager: DownloadManager
    let eventLog: EventLog
    let paths: DaemonPaths
    let startedAt: Date
    /// This run of the daemon (aria2's `getSessionInfo`).
    let runID = UUID()
    let logger: Logger
    /// Where downloads go when a client names no directory (`haul daemon --dir`).
    let defaultDirectory: String
    /// The dashboard's one-time links and browser sessions.
    let logins = DashboardLogins()
    /// Where the sessions' event logs and acknowledgements are kept (the manager's store).
    let sessionStore: any EventLogStore
    private let listenAddress = Mutex<String?>(nil)
    private let shutdownTrigger = Mutex<(@Sendable () async -> Void)?>(nil)
    /// Clients attached with "pause my session when I disconnect", per session.
    private let pausingClients = Mutex<[String: Int]>([:])
    /// The attached event streams, so an acknowledgement never deletes an event one of
    /// them has yet to send.
    private let readers = EventReaders()
    /// Settings changes, one at a time.
    private let settingsChanges = SerialQueue()
    /// Acknowledgements, written together.
    private let acknowledgements: Acknowledgements
    /// A drain of this node (`haul daemon drain`), once asked.
    let drain = NodeDrain()

    /// - Parameter sessionStore: where the sessions' event logs live (the manager's store's
    ///   engine: SQLite's ``Store``, or PostgreSQL's in fleet mode).
    init(
        manager: DownloadManager,
        sessionStore: any EventLogStore,
        eventLog: EventLog,
        paths: DaemonPaths,
        logger: Logger,
        defaultDirectory: String = DaemonService.downloadsDirectory()
    ) {
        self.defaultDirectory = defaultDirectory
        self.sessionStore = sessionStore
        self.manager = manager
        self.eventLog = eventLog
        self.paths = paths
        self.startedAt = Date()
        self.logger = logger
        self.acknowledgements = Acknowledgements(store: sessionStore) { [readers] in
            readers.floor($0)
        }
    }

    /// The TCP listener's address, once it listens.
    var listen: String? {
        get { listenAddress.withLock { $0 } }
        set { listenAddress.withLock { $0 = newValue } }
    }

    func onShutdownRequest(_ trigger: @escaping @Sendable () async -> Void) {
        shutdownTrigger.withLock { $0 = trigger }
    }

    // MARK: Sessions and their event logs

    /// Every session with its tasks and the events its clients have yet to acknowledge.
    func sessions() async throws -> [API.Session] {
        try await sessionStore.sessionSummaries().map {
            API.Session(name: $0.name, tasks: $0.tasks, pendingEvents: $0.pendingEvents)
        }
    }

    /// Logged events of a session (of all sessions with nil) after `after`, oldest first.
    func loggedEvents(session: String?, after: Int64, limit: Int = 1_000) async throws -> [EventRecord] {
        try await sessionStore.loggedEvents(session: session, after: after, limit: limit)
    }

    /// The last event a session's clients acknowledged.
    func acknowledgedEventID(session: String) async throws -> Int64 {
        try await sessionStore.acknowledgedEventID(session: session)
    }

    /// The id of the newest event ever logged (0 before the first), acknowledged or not.
    func lastEventID() async throws -> Int64 {
        try await sessionStore.lastEventID()
    }

    /// The limits in force, as `GET /v1/settings` shows them.
    /// In a fleet: this node's (or `node`'s) own limits, with the fleet's caps.
    func settings(node: String? = nil) async throws -> API.Settings {
        let own = await ownSettings()
        guard let view = try fleetSettings(for: node, caps: nil) else { return own }
        var settings = own
        if let node, node != view.fleet.node {
            try await view.validate(StoredLimits(), meteredInterfaces: nil, for: node)
            settings = try await view.settings(of: node, over: own)
        }
        settings.node = settings.node ?? view.fleet.node
        settings.fleet = try await view.fleet.fleetCaps()
        return settings
    }

    private func ownSettings() async -> API.Settings {
        let limits = await manager.limits
        return API.Settings(
            maxConcurrentDownloads: limits.maxConcurrentDownloads,
            maxDownloadsPerHost: limits.maxDownloadsPerHost,
            maxConnectionsPerHost: limits.maxConnectionsPerHost,
            overallRateLimit: manager.overallRateLimit ?? 0,
            giveUpAfter: await manager.keepsTrying?.giveUpAfter.components.seconds,
            allowMetered: await manager.networkPolicy.allowsMetered,
            meteredInterfaces: await manager.networkPolicy.meteredInterfaces,
            lowestSpeedLimit: manager.lowestSpeed?.bytesPerSecond ?? 0,
            lowestSpeedTime: manager.lowestSpeed?.time.components.seconds ?? 30
        )
    }

    /// Stops the daemon cleanly, as SIGTERM does.
    func requestShutdown() async {
        let trigger = shutdownTrigger.withLock { $0 }
        await trigger?()
    }

    /// The daemon's tasks per state, as its listings show them (``DownloadManager/stateCounts(correcting:)``):
    /// in fleet mode, the whole fleet's.
    func stateCounts() async throws -> [String: Int] {
        try await manager.stateCounts(correcting: try await sessionStore.backgroundStateCounts())
    }

    func status() async throws -> API.Status {
        let counts = try await stateCounts()
        let overall = await manager.overallProgress()
        let limits = await manager.limits
        var status = API.Status(
            pid: getpid(),
            version: HaulVersion.current,
            startedAt: startedAt,
            uptimeSeconds: Date().timeIntervalSince(startedAt),
            home: paths.home.path,
            socket: paths.socket,
            store: paths.home.storePath,
            listen: listen,
            directory: defaultDirectory,
            tasks: counts,
            // From the same counts as `tasks`: the two never disagree.
            running: counts[TaskState.running.rawValue] ?? 0,
            waiting: counts[TaskState.queued.rawValue] ?? 0,
            bytesPerSecond: overall.bytesPerSecond,
            maxConcurrentDownloads: limits.maxConcurrentDownloads,
            maxDownloadsPerHost: limits.maxDownloadsPerHost,
            maxConnectionsPerHost: limits.maxConnectionsPerHost,
            eventStreams: readers.count,
            network: await network(waiting: counts[TaskState.waitingForNetwork.rawValue] ?? 0)
        )
        if let fleet = sessionStore as? any FleetView {
            // The limits are this node's own; the counts are the fleet's (each node's share: its leases).
            status.store = fleet.storeDescription
            let lease = fleet.leaseDuration.components
            status.fleet = API.Status.Fleet(
                node: fleet.node,
                store: fleet.storeDescription,
                leaseSeconds: Double(lease.seconds) + Double(lease.attoseconds) / 1e18,
                nodes: try await fleet.fleetNodes(),
                caps: try await fleet.fleetCaps()
            )
        }
        return status
    }

    /// The default route as the kernel has it now, and the metered policy; nil when the
    /// manager does not watch the network.
    func network(waiting: Int) async -> API.Status.Network? {
        guard let status = await manager.networkStatus else { return nil }
        let policy = await manager.networkPolicy
        return API.Status.Network(
            interface: status.defaultRoute?.interface,
            sourceAddress: status.defaultRoute?.sourceAddress,
            usable: status.isConnected,
            metered: status.isMetered,
            allowMetered: policy.allowsMetered,
            meteredInterfaces: policy.meteredInterfaces,
            meteredBySystem: status.meteredBySystem,
            waitingTasks: waiting
        )
    }

    /// Applies an operation: to explicitly named tasks, all of which must exist and be in a
    /// state it applies to (or nothing changes); to a session's or all tasks, to those it applies to.
    /// - Returns: the tasks it applied to, as they are now (as they were, for `remove`).
    func apply(_ operation: TaskOperation, to selector: API.Selector) async throws -> [DownloadInfo] {
        try selector.validate()
        let explicit = selector.ids
        if explicit?.isEmpty == true { throw HaulError(.invalidArgument, "No task ids given") }
        var tasks = try await manager.tasks(session: selector.session)
        let ids = explicit ?? tasks.map(\.id)
        let done = try await manager.perform(
            operation,
            on: ids,
            strict: explicit != nil,
            deleteFiles: selector.deleteFiles ?? false
        )
        if operation != .remove { tasks = try await manager.tasks(session: selector.session) }
        let byID = Dictionary(uniqueKeysWithValues: tasks.map { ($0.id, $0) })
        return done.compactMap { byID[$0] }
    }

    /// Changes the rate limit (bytes per second, 0 for none) of explicitly named tasks (all
    /// must exist), or of a session's or all unfinished tasks.
    /// - Returns: the tasks changed.
    func setRateLimit(_ bytesPerSecond: Int64, for selector: API.Selector) async throws -> [DownloadInfo] {
        try selector.validate()
        guard bytesPerSecond >= 0 else { throw HaulError(.invalidArgument, "The rate limit must be 0 (none) or more") }
        let tasks = try await manager.tasks(session: selector.session)
        let ids =
            selector.ids
            ?? tasks.filter { ![.completed, .cancelled].contains($0.state) }.map(\.id)
        try await manager.setRateLimit(bytesPerSecond == 0 ? nil : bytesPerSecond, for: ids)
        let changed = Set(ids)
        return try await manager.tasks(session: selector.session).filter { changed.contains($0.id) }
    }

    /// Changes the daemon's limits and keeps them in the store for the next start. Every
    /// field is checked before any applies, and changes apply one after another, so what
    /// the store keeps is what runs. In a fleet: `node` names another node whose own limits
    /// change (it applies them when it hears of it), and `caps` are the fleet's over all
    /// nodes (what runs over them anywhere goes back, sent by the daemon the change came
    /// through).
    /// - Throws: ``HaulError/Code/invalidArgument`` naming the first bad field; nothing changes then.
    func changeLimits(
        _ change: StoredLimits,
        meteredInterfaces: [String]? = nil,
        node: String? = nil,
        caps: API.FleetCaps? = nil
    ) async throws {
        let fleet = try fleetSettings(for: node, caps: caps)
        if let caps { try FleetSettings.validate(caps) }
        let other = node.flatMap { $0 == fleet?.fleet.node ? nil : $0 }
        if let other, let fleet {
            try await fleet.validate(change, meteredInterfaces: meteredInterfaces, for: other)
        } else {
            try change.validate()
            if let meteredInterfaces { try NetworkPolicy(meteredInterfaces: meteredInterfaces).validate() }
        }
        let manager = self.manager
        try await settingsChanges.run {
            // In a fleet the limits and the caps land together, or not at all.
            if let fleet {
                try await fleet.fleet.saveLimits(change, of: other ?? fleet.fleet.node, caps: caps)
            } else {
                try await manager.store.saveLimits(change)
            }
            if other == nil {  // Another node applies its own when it hears of them.
                if let meteredInterfaces { try await manager.store.saveMeteredInterfaces(meteredInterfaces) }
                try await DaemonSettings.apply(change, meteredInterfaces: meteredInterfaces, to: manager)
            }
            if caps != nil { try await manager.sendBackOverCaps() }
        }
    }

    /// The fleet's settings: nil when the daemon is not in a fleet.
    /// - Throws: ``HaulError/Code/invalidArgument`` when they are given to a daemon that
    ///   is not in a fleet.
    private func fleetSettings(for node: String?, caps: API.FleetCaps?) throws -> FleetSettings? {
        guard let fleet = sessionStore as? any FleetView else {
            guard node == nil, caps == nil else {
                throw HaulError(
                    .invalidArgument,
                    "This daemon is not in a fleet: it has no other nodes and no fleet caps",
                    hint: "Leave out --node and --fleet, or start the daemons of a fleet with --store postgres://…"
                )
            }
            return nil
        }
        return FleetSettings(fleet: fleet)
    }

    /// Applies the limits the store keeps now: in a fleet, another daemon changed them.
    /// Values out of range there are left alone (the start already said so).
    func applyStoredLimits() async {
        let manager = self.manager
        do {
            try await settingsChanges.run {
                let (limits, _) = try await manager.store.storedLimits()
                let metered = try await manager.store.storedMeteredInterfaces()
                try await DaemonSettings.apply(limits, meteredInterfaces: metered, to: manager)
            }
        } catch {
            logger.warning("cannot apply the fleet's changed limits", metadata: ["error": "\(error)"])
        }
    }

    /// Acts on what another daemon of the fleet signalled: changed limits apply here now;
    /// events it logged reach this daemon's event streams now.
    func fleetSignalled(_ signal: FleetSignal) async {
        switch signal {
        case .settings:
            await applyStoredLimits()
        case .events:
            eventLog.loggedElsewhere()
        case .resumed:
            await applyStoredLimits()
            eventLog.loggedElsewhere()
            await drain.heard(core: self)
        case .drain(let node):
            if node == (sessionStore as? any FleetView)?.node { await drain.heard(core: self) }
        case .task, .queue:
            break
        }
    }

    /// An event stream attached, having sent nothing after `sent`.
    func readerAttached(session: String?, sent: Int64) -> UUID {
        readers.attach(session: session, sent: sent)
    }

    func readerAdvanced(_ id: UUID, sent: Int64) {
        readers.advance(id, sent: sent)
    }

    /// An event stream ended: the acknowledged events it held back can go now.
    func readerDetached(_ id: UUID, session: String?) async {
        readers.detach(id)
        guard let session else { return }
        do {
            try await sessionStore.dropAcknowledgedEvents(session: session, keepingAfter: readers.floor(session))
        } catch {
            logger.error("cannot drop acknowledged events", metadata: ["error": "\(error)"])
        }
    }

    /// Acknowledges a session's events through `eventID` for every client of it: later
    /// attaches start after it. The events are deleted once no attached stream still has
    /// to send them. Acknowledgements that arrive together are written in one transaction.
    func acknowledge(session: String, through eventID: Int64) async throws {
        try await acknowledgements.acknowledge(session: session, through: eventID)
    }

    /// A client that wants its session paused when it goes is attached.
    func clientAttached(pausing session: String) {
        pausingClients.withLock { $0[session, default: 0] += 1 }
    }

    /// Such a client's stream ended. When it went away (not because the daemon stops) and it
    /// was the last of its session, the session's tasks pause, keeping their data.
    func clientDetached(pausing session: String, clientGone: Bool) async {
        let last = pausingClients.withLock { clients -> Bool in
            let count = (clients[session] ?? 1) - 1
            clients[session] = count > 0 ? count : nil
            return count <= 0
        }
        guard last, clientGone else { return }
        logger.info("the last client of session '\(session)' went away: pausing its tasks")
        do {
            _ = try await apply(.pause, to: .session(session))
        } catch {
            logger.error("cannot pause session '\(session)'", metadata: ["error": "\(error)"])
        }
    }
}

/// The attached event streams: their session (nil for all) and the last event each sent.
final class EventReaders: Sendable {
    private let readers = Mutex<[UUID: (session: String?, sent: Int64)]>([:])

    var count: Int { readers.withLock { $0.count } }

    func attach(session: String?, sent: Int64) -> UUID {
        let id = UUID()
        readers.withLock { $0[id] = (session, sent) }
        return id
    }

    func advance(_ id: UUID, sent: Int64) {
        readers.withLock { $0[id]?.sent = sent }
    }

    func detach(_ id: UUID) {
        readers.withLock { _ = $0.removeValue(forKey: id) }
    }

    /// The last event every attached stream of `session` has sent; nil when none is attached.
    func floor(_ session: String) -> Int64? {
        readers.withLock { readers in
            readers.values.filter { $0.session == nil || $0.session == session }.map(\.sent).min()
        }
    }
}
