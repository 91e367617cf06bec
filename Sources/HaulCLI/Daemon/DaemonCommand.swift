import ArgumentParser
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulPostgres
import HaulWire
import HaulWireMapping
import Logging

extension HaulCommand {
    /// `haul daemon`: run the background daemon; `haul daemon stop` stops it.
    struct Daemon: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "daemon",
            abstract: "Run the background daemon that owns 'haul add' downloads.",
            discussion: Examples.block([
                ("haul daemon", "start it in the background"),
                ("haul daemon --listen 127.0.0.1:7800", "also on TCP, with a token"),
                ("haul daemon stop", "stop it; downloads continue at its next start"),
                ("haul daemon drain", "in a fleet: hand its downloads to the other nodes, then stop"),
            ]),
            subcommands: [Start.self, Stop.self, Drain.self],
            defaultSubcommand: Start.self
        )

        struct Start: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "start",
                abstract: "Start the daemon in the background (or, with --foreground, run it here).",
                discussion: """
                    The API listens on $HAUL_HOME/daemon.sock (0600, in a 0700 directory). SIGTERM or \
                    SIGINT (or 'haul daemon stop') stop it cleanly: running downloads checkpoint and \
                    continue at the next start. The limits (--max-concurrent, --max-per-host, \
                    --total-limit-rate, and 'haul set') are kept in the store: a start without them \
                    uses the values last set.

                    \(Examples.block([
                        ("haul daemon start -j 4 --max-per-host 2", "limits kept in the store"),
                        ("haul daemon --foreground --log-level debug", "in this terminal"),
                        ("haul daemon --on-complete logger", "log ID PATH URL of every finished task to syslog"),
                    ]))
                    """
            )

            @Flag(help: "Run in this process, logging to stderr, until stopped.")
            var foreground = false

            @Flag(help: .hidden)
            var detach = false

            @Option(
                help:
                    "Also listen on TCP, e.g. 127.0.0.1:7800; every request needs the token in $HAUL_HOME/daemon.token."
            )
            var listen: String?

            @Flag(help: "Allow --listen on an address other than loopback (reachable from other machines).")
            var listenPublic = false

            @Option(
                name: [.customShort("j"), .customLong("max-concurrent")],
                help: "How many downloads run at once (default: as last set, else 3)."
            )
            var maxConcurrent: Int?

            @Option(
                name: .customLong("max-per-host"),
                help: "How many downloads run at once against one host (default: as last set, else 8)."
            )
            var maxPerHost: Int?

            @Option(
                name: .customLong("max-connections-per-host"),
                help:
                    "How many connections the downloads to one host hold at once, together; each running download holds one before any holds a second (default: as last set, else 16)."
            )
            var maxConnectionsPerHost: Int?

            @Option(
                name: .customLong("total-limit-rate"),
                help:
                    "Limit all downloads together, e.g. 20M (bytes per second), 0 for none (default: as last set); 'haul set --limit-rate' changes it."
            )
            var totalLimitRate: ByteCount?

            @Option(
                name: .customLong("rpc-secret"),
                help:
                    "The secret aria2 clients give on /jsonrpc (as \"token:SECRET\"); default: the token in $HAUL_HOME/daemon.token. Also read from HAUL_RPC_SECRET."
            )
            var rpcSecret: String?

            @Flag(
                name: .customLong("rpc-allow-origin-all"),
                help:
                    "Let web pages of any origin call /jsonrpc (Access-Control-Allow-Origin: *); the secret is still required."
            )
            var rpcAllowOriginAll = false

            @Option(
                name: .customLong("dir"),
                help: "Where downloads added by aria2 clients go when they name no dir (default: ~/Downloads, else ~)."
            )
            var directory: String?

            @Option(
                name: .customLong("store"),
                help: ArgumentHelp(
                    "Fleet mode: keep the tasks and session logs in this PostgreSQL database, shared with other daemons (postgres://USER[:PASSWORD]@HOST[:PORT]/DB[?sslmode=disable|prefer|require]). Also read from HAUL_STORE.",
                    valueName: "url"
                )
            )
            var store: String?

            @Option(
                name: .customLong("node"),
                help: "Fleet mode: this daemon's name in the fleet (default: the host name)."
            )
            var node: String?

            @Option(
                name: .customLong("lease"),
                help: ArgumentHelp(
                    "Fleet mode: seconds a task's lease lasts unless this daemon renews it (default 15); a daemon that dies gives its tasks up after this.",
                    valueName: "seconds"
                )
            )
            var lease: Double?

            @Option(help: "Log level: trace, debug, info, notice, warning, error.")
            var logLevel: String = "info"

            @Option(name: .customLong("checkpoint-interval"), help: .hidden)
            var checkpointInterval: Double?

            @Option(help: "Quick retries of each run before a download waits to try again later (default 5).")
            var retries: Int?

            @OptionGroup(title: "Timing")
            var timing: TimingOptions

            @Flag(
                name: .customLong("no-remote-time"),
                help:
                    "Keep the time of writing as finished files' modification time (default: the server's Last-Modified)."
            )
            var noRemoteTime = false

            @Flag(
                name: .customLong("no-xattr"),
                help: "Do not record finished files' URLs in the user.xdg.origin.url extended attribute."
            )
            var noXattr = false

            @Option(
                name: .customLong("on-complete"),
                help: ArgumentHelp(
                    "Run this program when any download is complete (a task's own --on-complete wins); see haul get --help.",
                    valueName: "program"
                )
            )
            var onComplete: String?

            @Option(
                name: .customLong("on-error"),
                help: ArgumentHelp(
                    "Run this program when any download fails for good (a task's own --on-error wins).",
                    valueName: "program"
                )
            )
            var onError: String?

            /// The first wait before trying again, in seconds (30 unless tests say).
            @Option(name: .customLong("retry-first-delay"), help: .hidden)
            var retryFirstDelay: Double?

            /// The longest wait between tries, in seconds (600 unless tests say).
            @Option(name: .customLong("retry-max-delay"), help: .hidden)
            var retryMaxDelay: Double?

            func validate() throws {
                guard maxConcurrent ?? 1 >= 1, maxPerHost ?? 1 >= 1, maxConnectionsPerHost ?? 1 >= 1 else {
                    throw ValidationError("Limits must be 1 or more")
                }
                guard Logger.Level(rawValue: logLevel) != nil else {
                    throw ValidationError("Unknown log level '\(logLevel)'")
                }
                do {
                    try Hooks(onComplete: onComplete, onError: onError).validate()
                } catch let error as HaulError {
                    throw ValidationError(error.description)
                }
                if let listen {
                    let (host, _) = try Start.parseListen(listen)
                    if !listenPublic, !DaemonService.isLoopback(host) {
                        throw ValidationError(
                            "--listen \(host) is not a loopback address: use 127.0.0.1 or ::1, or add --listen-public to mean it"
                        )
                    }
                }
                if listenPublic, listen == nil { throw ValidationError("--listen-public goes with --listen") }
                try Start.check { _ = try givenRPCSecret() }
                if let checkpointInterval, !(checkpointInterval >= 0.01 && checkpointInterval <= 3600) {
                    throw ValidationError("--checkpoint-interval must be from 0.01 to 3600 seconds")
                }
                if let directory, !directory.hasPrefix("/") {
                    throw ValidationError("--dir must be an absolute path")
                }
                if let retries, !(0...100).contains(retries) { throw ValidationError("--retries must be 0 to 100") }
                if let lease, !(lease >= 1 && lease <= 3600) {
                    throw ValidationError("--lease must be from 1 to 3600 seconds")
                }
                if let node { try Start.check { try FleetQueue.validateNodeName(node) } }
                if node != nil || lease != nil, storeURL == nil {
                    throw ValidationError("--node and --lease go with --store (or HAUL_STORE)")
                }
                if let storeURL { try Start.check { _ = try PostgresLocation(parsing: storeURL) } }
                for delay in [retryFirstDelay, retryMaxDelay].compactMap({ $0 }) where !(delay > 0 && delay <= 86400) {
                    throw ValidationError("Retry delays must be positive numbers of seconds, at most a day")
                }
            }

            /// The RPC secret given: --rpc-secret, else HAUL_RPC_SECRET (empty means unset), checked.
            func givenRPCSecret() throws -> String? {
                if let rpcSecret { return try RPCSecret.checked(rpcSecret, from: "--rpc-secret") }
                let environment = ProcessInfo.processInfo.environment["HAUL_RPC_SECRET"]
                return try RPCSecret.checked(environment, from: "HAUL_RPC_SECRET")
            }

            /// The fleet's database: --store, else HAUL_STORE.
            var storeURL: String? {
                store ?? ProcessInfo.processInfo.environment["HAUL_STORE"].flatMap { $0.isEmpty ? nil : $0 }
            }

            /// A Haul error as the sentence a bad option is refused with.
            static func check(_ body: () throws -> Void) throws {
                do {
                    try body()
                } catch let error as HaulError {
                    throw ValidationError(error.description)
                }
            }

            static func parseListen(_ text: String) throws -> (host: String, port: Int) {
                guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]),
                    (0...65535).contains(port), colon > text.startIndex
                else { throw ValidationError("--listen takes HOST:PORT, e.g. 127.0.0.1:7800") }
                return (String(text[..<colon]), port)
            }

            func run() async throws {
                let home = HaulHome.resolve()
                guard foreground else {
                    try await startInBackground(home)
                    return
                }
                if detach {
                    // Leave the terminal's session, so its hang-up or Ctrl-C does not reach us.
                    _ = setsid()
                    signal(SIGHUP, SIG_IGN)
                }
                var logger = Logger(label: "haul.daemon") { StreamLogHandler.standardError(label: $0) }
                logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
                var configuration = DaemonService.Configuration(
                    home: home,
                    maxConcurrentDownloads: maxConcurrent,
                    maxDownloadsPerHost: maxPerHost,
                    listen: try listen.map(Start.parseListen),
                    listenPublicly: listenPublic,
                    handlesSignals: true,
                    checkpointInterval: checkpointInterval.map { .milliseconds(Int64($0 * 1000)) },
                    overallRateLimit: totalLimitRate?.bytes,
                    logger: logger
                )
                configuration.maxConnectionsPerHost = maxConnectionsPerHost
                configuration.rpcSecret = try givenRPCSecret()
                // A process of its own: a stop that cannot finish ends it anyway, after a minute.
                configuration.stopDeadline = .seconds(60)
                configuration.rpcDirectory = directory
                configuration.rpcAllowsAllOrigins = rpcAllowOriginAll
                DaemonMetrics.bootstrap()
                configuration.metrics = DaemonMetrics.registry
                configuration.retriesPerRun = retries
                configuration.connectTimeout = timing.connect
                configuration.readTimeout = timing.read
                configuration.lowestSpeed = timing.lowestSpeed
                configuration.maxRetryAfter = timing.maxRetryAfter
                configuration.setsRemoteTime = !noRemoteTime
                configuration.setsOriginAttribute = !noXattr
                configuration.hooks = try Hooks(onComplete: onComplete, onError: onError).resolved()
                configuration.networkWaitLimit = timing.waitForNetwork.map { .seconds($0.seconds) }
                if let retryFirstDelay {
                    configuration.keepsTrying.firstDelay = .milliseconds(Int64(retryFirstDelay * 1000))
                }
                if let retryMaxDelay { configuration.keepsTrying.maxDelay = .milliseconds(Int64(retryMaxDelay * 1000)) }
                do {
                    var shared: PostgresStore?
                    if let storeURL {
                        let location = try PostgresLocation(parsing: storeURL)
                        let store = try await PostgresStore.connect(
                            to: location,
                            node: node ?? FleetQueue.defaultNode,
                            leaseDuration: lease.map { .milliseconds(Int64($0 * 1000)) }
                                ?? PostgresStore.defaultLeaseDuration,
                            logger: logger
                        )
                        configuration.sharedStore = store
                        shared = store
                        logger.info("fleet mode", metadata: ["node": "\(store.node)", "store": "\(location)"])
                    }
                    let daemon = DaemonService(configuration: configuration)
                    do {
                        try await daemon.run()
                    } catch {
                        try? await shared?.closeDatabase()
                        throw error
                    }
                    try await shared?.closeDatabase()
                } catch let error as HaulError {
                    CLIError.print(error)
                    throw ExitStatus.daemon.exit
                }
            }

            private func startInBackground(_ home: HaulHome) async throws {
                // The secret through the environment: arguments are visible to every user.
                let secret = try givenRPCSecret()
                // And the fleet's database URL, which may hold a password.
                var environment = secret.map { ["HAUL_RPC_SECRET": $0] } ?? [:]
                if let storeURL { environment["HAUL_STORE"] = storeURL }
                try await BackgroundDaemon(home: home, listen: listen).start(
                    arguments: try forwardedArguments(),
                    environment: environment
                )
            }

            /// The options the daemon started in the background is given (the secret and the
            /// store's URL go through its environment).
            private func forwardedArguments() throws -> [String] {
                var arguments: [String] = []
                if let maxConcurrent { arguments += ["--max-concurrent", "\(maxConcurrent)"] }
                if let maxPerHost { arguments += ["--max-per-host", "\(maxPerHost)"] }
                if let maxConnectionsPerHost {
                    arguments += ["--max-connections-per-host", "\(maxConnectionsPerHost)"]
                }
                if let listen { arguments += ["--listen", listen] }
                if listenPublic { arguments.append("--listen-public") }
                arguments += ["--log-level", logLevel]
                if let checkpointInterval { arguments += ["--checkpoint-interval", "\(checkpointInterval)"] }
                if let totalLimitRate { arguments += ["--total-limit-rate", "\(totalLimitRate.bytes)"] }
                if let retries { arguments += ["--retries", "\(retries)"] }
                arguments += timing.arguments
                if noRemoteTime { arguments.append("--no-remote-time") }
                if noXattr { arguments.append("--no-xattr") }
                let hooks = try Hooks(onComplete: onComplete, onError: onError).resolved()
                if let program = hooks.onComplete { arguments += ["--on-complete", program] }
                if let program = hooks.onError { arguments += ["--on-error", program] }
                if let retryFirstDelay { arguments += ["--retry-first-delay", "\(retryFirstDelay)"] }
                if let retryMaxDelay { arguments += ["--retry-max-delay", "\(retryMaxDelay)"] }
                if let directory { arguments += ["--dir", directory] }
                if rpcAllowOriginAll { arguments.append("--rpc-allow-origin-all") }
                if let node { arguments += ["--node", node] }
                if let lease { arguments += ["--lease", "\(lease)"] }
                return arguments
            }
        }
    }
}
