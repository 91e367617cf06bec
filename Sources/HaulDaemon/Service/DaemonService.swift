import Foundation
import Haul
import HaulWire
import HaulWireMapping
import Hummingbird
import Logging
import NIOCore
import Prometheus
import ServiceLifecycle
import Synchronization

/// `haul daemon`: owns background transfers. Hosts a ``DownloadManager`` on the store of
/// its `HAUL_HOME`, logs every task's events per session, and serves the HTTP+JSON API on
/// `$HAUL_HOME/daemon.sock` (and, when asked, on loopback TCP with a token).
///
/// ```swift
/// let daemon = DaemonService(configuration: .init(home: HaulHome.resolve()))
/// try await daemon.run()        // until SIGTERM/SIGINT (with handlesSignals) or stop()
/// ```
/// Stopping is clean: running downloads checkpoint and wait in the queue for the next start.
/// A `kill -9` loses at most one checkpoint interval of each running download.
public final class DaemonService: Service, Sendable {
    public struct Configuration: Sendable {
        /// The home: store, socket, lock and token live in it.
        public var home: HaulHome
        /// How many downloads run at once. nil: the value last set (by `PUT /v1/settings` or
        /// an earlier start), kept in the store; 3 when none was. A value given here is kept too.
        public var maxConcurrentDownloads: Int?
        /// How many downloads run at once against one host; nil as for
        /// ``maxConcurrentDownloads``, 8 when never set.
        public var maxDownloadsPerHost: Int?
        /// How many connections the downloads to one host hold at once, together; nil as for
        /// ``maxConcurrentDownloads``, 16 when never set.
        public var maxConnectionsPerHost: Int?
        /// A loopback TCP listener (`host`, `port`; port 0 picks a free one). Every request
        /// on it must carry the token of `$HAUL_HOME/daemon.token`.
        public var listen: (host: String, port: Int)?
        /// Allows ``listen`` on an address other than loopback (every interface with
        /// `0.0.0.0`), reachable from other machines with the token; a warning is logged.
        /// Without it such an address is refused.
        public var listenPublicly: Bool
        /// Stop cleanly on SIGTERM and SIGINT.
        public var handlesSignals: Bool
        /// The longest a stop may take before the process exits anyway (``StopDeadline``):
        /// for a daemon that is a process of its own; nil (the default) never exits.
        public var stopDeadline: Duration?
        /// Unacknowledged events kept per session; older ones are dropped beyond it.
        public var eventsPerSession: Int
        /// How often running downloads checkpoint (nil: the library's default).
        public var checkpointInterval: Duration?
        /// How tasks keep trying after failures that may pass; its ``KeepTrying/giveUpAfter``
        /// is replaced by the value last set (`PUT /v1/settings`, kept in the store) when there is one.
        public var keepsTrying = KeepTrying()
        /// The retries of each run before it waits to try again (the transfer's own, quick ones).
        public var retriesPerRun: Int?
        /// The downloads' connect timeout, read timeout and longest `Retry-After` wait; nil
        /// for the library's defaults (30 s, 60 s, 600 s).
        public var connectTimeout: Duration?
        public var readTimeout: Duration?
        public var maxRetryAfter: Duration?
        /// Whether finished files take the server's `Last-Modified` as their modification time.
        public var setsRemoteTime = true
        /// Whether finished files get the `user.xdg.origin.url` extended attribute.
        public var setsOriginAttribute = true
        /// Programs run when any download ends; a task's own win.
        public var hooks = Hooks.none
        /// How long a task may wait for the network before it fails; nil (the default) for
        /// as long as it takes.
        public var networkWaitLimit: Duration?
        /// A limit on all downloads together, in bytes per second, 0 for none; nil as for
        /// ``maxConcurrentDownloads``, none when never set. `PUT /v1/settings` changes it live.
        public var overallRateLimit: Int64?
        /// The secret aria2's clients give as `"token:SECRET"` on `/jsonrpc`; nil: the
        /// daemon's token (`$HAUL_HOME/daemon.token`).
        /// The speed each connection must keep (``LowestSpeed``); nil for none.
        public var lowestSpeed: LowestSpeed?
        public var rpcSecret: String?
        /// Where downloads added over `/jsonrpc` go when they name no `dir`; nil: the user's
        /// `~/Downloads` when it exists, else the home directory.
        public var rpcDirectory: String?
        /// Answers on `/jsonrpc` carry `Access-Control-Allow-Origin: *` (aria2's
        /// `--rpc-allow-origin-all`), for web UIs served from another origin.
        public var rpcAllowsAllOrigins = false
        /// Where `GET /metrics` reads the metrics from: ``DaemonMetrics/registry`` once the
        /// program bootstrapped swift-metrics with it; nil serves no `/metrics`.
        public var metrics: PrometheusCollectorRegistry?
        /// A store several daemons share (fleet mode: PostgreSQL, opened by the caller, which
        /// also closes it): the tasks and the session event logs live there instead of in the
        /// home's SQLite store. The home still holds the socket, the lock, the token and the log.
        /// Its queue is the daemons' shared queue: tasks run here only under its claims.
        package var sharedStore: (any TaskStore & EventLogStore & SharedQueue)?
        public var logger: Logger

        public init(
            home: HaulHome,
            maxConcurrentDownloads: Int? = nil,
            maxDownloadsPerHost: Int? = nil,
            listen: (host: String, port: Int)? = nil,
            listenPublicly: Bool = false,
            handlesSignals: Bool = false,
            eventsPerSession: Int = 10_000,
            checkpointInterval: Duration? = nil,
            overallRateLimit: Int64? = nil,
            logger: Logger = Logger(label: "haul.daemon")
        ) {
            self.home = home
            self.maxConcurrentDownloads = maxConcurrentDownloads
            self.maxDownloadsPerHost = maxDownloadsPerHost
            self.listen = listen
            self.listenPublicly = listenPublicly
            self.handlesSignals = handlesSignals
            self.eventsPerSession = eventsPerSession
            self.checkpointInterval = checkpointInterval
            self.overallRateLimit = overallRateLimit
            self.logger = logger
        }
    }

    private let configuration: Configuration
    private let group = Mutex<ServiceGroup?>(nil)
    private let deadline: StopDeadline?
    private let stopRequested = Mutex(false)

    public init(configuration: Configuration) {
        self.configuration = configuration
        deadline = configuration.stopDeadline.map { StopDeadline($0, logger: configuration.logger) }
    }

    /// The paths of this daemon's home.
    public var paths: DaemonPaths { DaemonPaths(home: configuration.home) }

    /// Runs until stopped (``stop()``, `POST /v1/shutdown`, or a signal when handled).
    /// - Throws: ``HaulError/Code/busy`` when another daemon runs for the same home, or
    ///   an error opening the store or the socket.
    public func run() async throws {
        let paths = self.paths
        let logger = configuration.logger
        ProcessMemory.limitArenas()
        if let listen = configuration.listen {
            try DaemonService.checkListenAddress(listen.host, publicly: configuration.listenPublicly, logger: logger)
        }
        let givenSecret = try RPCSecret.checked(configuration.rpcSecret, from: "The RPC secret")
        try DaemonService.prepareHome(paths.home.path, logger: logger)
        let lock = try DaemonLock.acquire(paths.lock)
        defer { withExtendedLifetime(lock) {} }
        try HomeFile.clearStaleSocket(paths.socket)
        defer { HomeFile.removeSocket(paths.socket) }

        let local = configuration.sharedStore == nil ? try await Store.opened(at: paths.home.storePath) : nil
        try await local?.migrateEventLog()
        defer {
            // Before the lock goes: once another process sees it free, this one writes nothing.
            do { try local?.closeDatabase() } catch {
                logger.error("cannot close the store", metadata: ["error": "\(error)"])
            }
        }
        let shared: (any TaskStore & EventLogStore)? = configuration.sharedStore
        guard let store: any TaskStore & EventLogStore = shared ?? local else { return }
        // Read before the manager exists: nothing may throw between its creation and its run.
        let token = try DaemonService.loadOrCreateToken(paths.token)
        let managerConfiguration = try await DaemonSettings.manager(for: configuration, store: store)
        let manager = try DownloadManager(configuration: managerConfiguration)
        let eventLog = EventLog(store: store, limitPerSession: configuration.eventsPerSession, logger: logger)
        let directory = configuration.rpcDirectory ?? DaemonService.downloadsDirectory()
        let core = DaemonCore(
            manager: manager,
            sessionStore: store,
            eventLog: eventLog,
            paths: paths,
            logger: logger,
            defaultDirectory: directory
        )
        // Subscribe before anything runs, so the log misses nothing.
        let events = manager.events()

        var services = listeners(core: core, token: token, secret: givenSecret)
        // Last in the list, so first to stop: transfers checkpoint and event streams end
        // before the servers close.
        // Subscribed before anything runs, like the events.
        let signals = (configuration.sharedStore as? any FleetView)?.fleetSignals()
        services.append(
            .init(
                service: CoreService(manager: manager, eventLog: eventLog, events: events, core: core, signals: signals)
            )
        )
        let group = ServiceGroup(
            configuration: .init(
                services: services,
                gracefulShutdownSignals: configuration.handlesSignals ? [.sigterm, .sigint] : [],
                logger: logger
            )
        )
        core.onShutdownRequest { [weak self] in await self?.stop() }
        if configuration.handlesSignals { deadline?.watchSignals() }
        self.group.withLock { $0 = group }
        if stopRequested.withLock({ $0 }) { await group.triggerGracefulShutdown() }
        try await group.run()
        logger.info("stopped")
    }

    /// The servers of the daemon's API, `/jsonrpc` and dashboard: on its socket (the owner's
    /// only), and on TCP when asked (a token required).
    private func listeners(
        core: DaemonCore,
        token: String,
        secret givenSecret: String?
    ) -> [ServiceGroupConfiguration.ServiceConfiguration] {
        let logger = configuration.logger
        var serverLogger = logger
        serverLogger.logLevel = max(logger.logLevel, .notice)
        let socketPath = paths.socket
        // aria2's clients authenticate with the secret as the first parameter of every call,
        // on the socket as on TCP.
        var rpc = Aria2RPC(
            core: core,
            secret: givenSecret ?? token,
            defaultDirectory: core.defaultDirectory
        )
        rpc.allowsAllOrigins = configuration.rpcAllowsAllOrigins
        let unixServer = Application(
            router: Routes.router(core: core, token: nil, rpc: rpc, metrics: configuration.metrics),
            server: rpc.webSocketServer,
            configuration: .init(address: .unixDomainSocket(path: socketPath), serverName: "haul"),
            onServerRunning: { _ in
                // The directory is 0700 already; the socket itself is for its owner only too.
                chmod(socketPath, 0o600)
                logger.info("listening", metadata: ["socket": "\(socketPath)", "pid": "\(getpid())"])
                SystemdNotification.ready()
            },
            logger: serverLogger
        )
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: Listener(address: socketPath, server: unixServer))
        ]
        if let listen = configuration.listen {
            let tcpServer = Application(
                router: Routes.router(core: core, token: token, rpc: rpc, metrics: configuration.metrics),
                server: rpc.webSocketServer,
                configuration: .init(address: .hostname(listen.host, port: listen.port), serverName: "haul"),
                onServerRunning: { channel in
                    let port = channel.localAddress?.port ?? listen.port
                    core.listen = "\(listen.host):\(port)"
                    logger.info("listening on TCP (token required)", metadata: ["address": "\(listen.host):\(port)"])
                },
                logger: serverLogger
            )
            services.append(.init(service: Listener(address: "\(listen.host):\(listen.port)", server: tcpServer)))
        }
        return services
    }

    /// Stops the daemon cleanly: running downloads checkpoint and wait for the next start.
    public func stop() async {
        deadline?.arm()
        stopRequested.withLock { $0 = true }
        let group = self.group.withLock { $0 }
        await group?.triggerGracefulShutdown()
    }

    /// `~/Downloads` when it exists, else the home directory (else `/tmp`).
    static func downloadsDirectory() -> String {
        let home = ProcessInfo.processInfo.environment["HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil } ?? "/tmp"
        let downloads = (home as NSString).appendingPathComponent("Downloads")
        var isDirectory: ObjCBool = false
        if FileManager.default.fileExists(atPath: downloads, isDirectory: &isDirectory), isDirectory.boolValue {
            return downloads
        }
        return home
    }

    /// Refuses a TCP address that is not loopback unless listening publicly was asked for.
    static func checkListenAddress(_ host: String, publicly: Bool, logger: Logger) throws {
        if isLoopback(host) { return }
        guard publicly else {
            throw HaulError(
                .invalidArgument,
                "--listen \(host) is not a loopback address: other machines could reach the daemon",
                hint: "Use 127.0.0.1 or ::1, or add --listen-public to mean it"
            )
        }
        logger.warning(
            "listening on a non-loopback address: any machine that can reach it and has the token controls the daemon",
            metadata: ["address": "\(host)"]
        )
    }

    /// `localhost`, 127.0.0.0/8, `::1` (and ::ffff:127.x).
    package static func isLoopback(_ host: String) -> Bool {
        let bare = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        if bare.lowercased() == "localhost" { return true }
        var v4 = in_addr()
        if inet_pton(AF_INET, bare, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, bare, &v6) == 1 else { return false }
        let bytes = withUnsafeBytes(of: v6) { Array($0) }
        if bytes[0..<15].allSatisfy({ $0 == 0 }) && bytes[15] == 1 { return true }
        return bytes[0..<10].allSatisfy({ $0 == 0 }) && bytes[10] == 0xff && bytes[11] == 0xff && bytes[12] == 127
    }

    /// Creates the home if needed and makes it private to its owner.
    static func prepareHome(_ path: String, logger: Logger) throws {
        try HaulHome.createDirectory(path)
        var info = stat()
        guard stat(path, &info) == 0 else { throw HaulError.fileSystem("stat", path: path, errno: errno) }
        if info.st_mode & 0o077 != 0 {
            guard chmod(path, 0o700) == 0 else { throw HaulError.fileSystem("chmod", path: path, errno: errno) }
            logger.notice("made the Haul home private (0700)", metadata: ["path": "\(path)"])
        }
    }

    /// The TCP token: read from its file, or generated (256 random bits) into a new 0600 file.
    static func loadOrCreateToken(_ path: String) throws -> String {
        if let text = try HomeFile.read(path) {
            let token = text.trimmingCharacters(in: .whitespacesAndNewlines)
            if token.count >= 32 { return token }
        }
        var generator = SystemRandomNumberGenerator()
        let token = (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
        unlink(path)
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw HaulError.fileSystem("create", path: path, errno: errno) }
        defer { close(descriptor) }
        let data = Array((token + "\n").utf8)
        guard write(descriptor, data, data.count) == data.count else {
            throw HaulError.fileSystem("write", path: path, errno: errno)
        }
        return token
    }
}

/// A server of the API. When it cannot listen (the port is taken, the address is not this
/// machine's), the daemon's start fails with that reason: the group stops the other
/// services, the manager sends its downloads back to the queue, and the lock is released.
private struct Listener<Server: Service>: Service {
    let address: String
    let server: Server

    func run() async throws {
        do {
            try await server.run()
        } catch let error as IOError {
            throw HaulError(
                error.errnoCode == EADDRINUSE ? .busy : .fileSystem,
                "Cannot listen on \(address): \(String(cString: strerror(error.errnoCode)))",
                hint: error.errnoCode == EADDRINUSE
                    ? "Choose another address with --listen, or stop the program that uses it"
                    : "Give --listen an address of this machine, such as 127.0.0.1:7800"
            )
        }
    }
}

/// Runs the manager and the event log; on graceful shutdown, stops the manager, whose
/// end ends the log and every event stream.
private struct CoreService: Service {
    let manager: DownloadManager
    let eventLog: EventLog
    let events: DownloadEvents
    let core: DaemonCore
    /// In a fleet, what the other daemons signal.
    let signals: AsyncStream<FleetSignal>?

    func run() async throws {
        let (manager, eventLog, events, core) = (self.manager, self.eventLog, self.events, self.core)
        try await withGracefulShutdownHandler {
            try await withThrowingTaskGroup(of: Void.self) { group in
                if let signals {
                    group.addTask {
                        for await signal in signals { await core.fleetSignalled(signal) }
                    }
                }
                group.addTask {
                    while !Task.isCancelled {
                        try? await Task.sleep(for: .seconds(1))
                        eventLog.heartbeat()
                    }
                }
                group.addTask { await eventLog.run(events) }
                do {
                    try await manager.run()
                } catch {
                    group.cancelAll()
                    throw error
                }
                // The manager's end finishes its events, which ends the log's loop.
                try await group.next()
                group.cancelAll()
            }
        } onGracefulShutdown: {
            Task { await manager.shutdown() }
        }
    }
}
