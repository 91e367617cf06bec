import ArgumentParser
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulWire
import HaulWireMapping

extension HaulCommand {
    /// `haul set`: change the daemon's limits live. (Not named `Set`, which would hide
    /// `Swift.Set` inside `HaulCommand`.)
    struct SetLimits: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Change the daemon's limits, live.",
            discussion: """
                Lowering --max-concurrent sends the most recently started downloads back to waiting \
                (keeping their data); raising it starts the oldest waiting ones. --limit-rate alone \
                limits all downloads together; with task ids, --session or --all it limits each of \
                those downloads. A rate of 0 removes the limit.

                In a fleet, --max-concurrent, --max-per-host, --max-connections-per-host and \
                --limit-rate are a node's own (this daemon's, or --node NAME's); with --fleet, \
                --max-concurrent, --max-per-host and --limit-rate are caps over all nodes together \
                (0 for none). The other settings hold for every node.

                \(Examples.block([
                    ("haul set --max-concurrent 2", "two at a time, from now"),
                    ("haul set --limit-rate 10M", "all downloads together at most 10 MiB/s"),
                    ("haul set --limit-rate 1M --session nightly", "each of a session's at most 1 MiB/s"),
                    ("haul set --give-up-after 6h", "keep trying failed downloads for 6 hours"),
                    ("haul set --lowest-speed-limit 1K", "break connections slower than 1 KiB/s for 30 s"),
                    ("haul set --node n2 -j 8", "in a fleet: node n2 runs eight at once"),
                    ("haul set --fleet --max-per-host 4", "in a fleet: at most four against one host, over all nodes"),
                ]))
                """
        )

        @Option(name: [.customShort("j"), .customLong("max-concurrent")], help: "How many downloads run at once.")
        var maxConcurrent: Int?

        @Option(name: .customLong("max-per-host"), help: "How many downloads run at once against one host.")
        var maxPerHost: Int?

        @Option(
            name: .customLong("max-connections-per-host"),
            help: "How many connections the downloads to one host hold at once, together."
        )
        var maxConnectionsPerHost: Int?

        @Option(
            name: .customLong("limit-rate"),
            help: "A speed limit such as 500K or 10M (bytes per second); 0 for none."
        )
        var limitRate: ByteCount?

        @Option(
            name: .customLong("give-up-after"),
            help:
                "How long a download keeps trying after failures that may pass (refused, reset, timeout, 5xx), e.g. 24h, 90m, 600s."
        )
        var giveUpAfter: SpokenDuration?

        @Option(
            name: .customLong("allow-metered"),
            help: "Whether downloads may use metered networks (mobile broadband): yes or no."
        )
        var allowMetered: YesNo?

        @Option(
            name: .customLong("metered-interfaces"),
            help: "The interfaces that are metered, as comma-separated names or patterns (default 'wwan*,ppp*')."
        )
        var meteredInterfaces: String?

        @Option(
            name: .customLong("lowest-speed-limit"),
            help:
                "Break a connection slower than this (e.g. 1K, bytes per second) for --lowest-speed-time and try it again; 0 for none. For downloads that start from now on."
        )
        var lowestSpeedLimit: ByteCount?

        @Option(
            name: .customLong("lowest-speed-time"),
            help: "Seconds a connection may stay under --lowest-speed-limit (1 to 86400)."
        )
        var lowestSpeedTime: Int64?

        @Argument(help: "Task ids (or unique prefixes) whose own rate limit to change.")
        var ids: [String] = []

        @Option(help: "Change the rate limit of every task of this session.")
        var session: String?

        @Flag(help: "Change the rate limit of every unfinished task.")
        var all = false

        @Option(help: "In a fleet: change this node's own limits (default: the daemon's own).")
        var node: String?

        @Flag(help: "In a fleet: --max-concurrent, --max-per-host and --limit-rate cap all nodes together.")
        var fleet = false

        func validate() throws {
            let selected = !ids.isEmpty || session != nil || all
            if selected, limitRate == nil { throw ValidationError("Tasks are named only with --limit-rate") }
            if selected, node != nil || fleet { throw ValidationError("--node and --fleet do not apply to tasks") }
            if node != nil, fleet { throw ValidationError("Give --node NAME or --fleet, not both") }
            if let node { try DownloadRequest.validateNodeName(node) }
            if fleet, maxConnectionsPerHost != nil {
                throw ValidationError("--max-connections-per-host is each node's own; leave out --fleet")
            }
            if [!ids.isEmpty, session != nil, all].filter({ $0 }).count > 1 {
                throw ValidationError("Give task ids, --session NAME, or --all")
            }
        }

        func run() async throws {
            try await withDaemon { client in
                if let limitRate, !ids.isEmpty || session != nil || all {
                    let selector: API.Selector =
                        if let session { .session(session) } else if all { .everything } else {
                            .tasks(try await TaskSelection.resolve(ids, client))
                        }
                    let changed = try await client.setRateLimit(limitRate.bytes == 0 ? nil : limitRate.bytes, selector)
                    let what = limitRate.bytes == 0 ? "no limit" : Format.speed(Double(limitRate.bytes))
                    CLIError.note("\(DaemonOutput.count(changed.count)) now at \(what).")
                    return
                }
                let unchanged =
                    maxConcurrent == nil && maxPerHost == nil && maxConnectionsPerHost == nil && limitRate == nil
                    && giveUpAfter == nil
                    && allowMetered == nil && meteredInterfaces == nil && lowestSpeedLimit == nil
                    && lowestSpeedTime == nil
                let settings =
                    unchanged
                    ? try await client.settings(node: node)
                    : try await client.update(change, node: node)
                print(Self.describe(settings))
            }
        }

        /// The change asked for: with `--fleet`, the downloads and the rate are the fleet's caps.
        private var change: API.Settings {
            var change = API.Settings(
                maxConcurrentDownloads: maxConcurrent,
                maxDownloadsPerHost: maxPerHost,
                maxConnectionsPerHost: maxConnectionsPerHost,
                overallRateLimit: limitRate?.bytes,
                giveUpAfter: giveUpAfter?.seconds,
                allowMetered: allowMetered?.value,
                meteredInterfaces: meteredInterfaces.map(ProxySettings.list),
                lowestSpeedLimit: lowestSpeedLimit?.bytes,
                lowestSpeedTime: lowestSpeedTime
            )
            if fleet {
                change.fleet = API.FleetCaps(
                    maxConcurrentDownloads: maxConcurrent,
                    maxDownloadsPerHost: maxPerHost,
                    overallRateLimit: limitRate?.bytes
                )
                (change.maxConcurrentDownloads, change.maxDownloadsPerHost, change.overallRateLimit) = (nil, nil, nil)
            }
            return change
        }

        /// The settings, one `name: value` a line: the node's (in a fleet, named first), the
        /// fleet's caps last.
        static func describe(_ settings: API.Settings) -> String {
            var lines: [String] = []
            if let node = settings.node { lines.append("node: \(node)") }
            lines.append("max-concurrent: \(settings.maxConcurrentDownloads ?? 0)")
            lines.append("max-per-host: \(settings.maxDownloadsPerHost ?? 0)")
            lines.append("max-connections-per-host: \(settings.maxConnectionsPerHost ?? 0)")
            lines.append("limit-rate: \(rate(settings.overallRateLimit))")
            if let seconds = settings.giveUpAfter { lines.append("give-up-after: \(SpokenDuration.text(seconds))") }
            if let allow = settings.allowMetered { lines.append("allow-metered: \(allow ? "yes" : "no")") }
            if let patterns = settings.meteredInterfaces {
                lines.append("metered-interfaces: \(patterns.joined(separator: ","))")
            }
            if let floor = settings.lowestSpeedLimit {
                let time = settings.lowestSpeedTime ?? 30
                lines.append("lowest-speed: \(floor == 0 ? "none" : "\(Format.speed(Double(floor))) for \(time) s")")
            }
            if let caps = settings.fleet {
                lines.append("fleet-max-concurrent: \(caps.maxConcurrentDownloads.map(String.init) ?? "none")")
                lines.append("fleet-max-per-host: \(caps.maxDownloadsPerHost.map(String.init) ?? "none")")
                lines.append("fleet-limit-rate: \(rate(caps.overallRateLimit))")
            }
            return lines.joined(separator: "\n")
        }

        private static func rate(_ bytesPerSecond: Int64?) -> String {
            guard let bytesPerSecond, bytesPerSecond > 0 else { return "none" }
            return Format.speed(Double(bytesPerSecond))
        }
    }
}
