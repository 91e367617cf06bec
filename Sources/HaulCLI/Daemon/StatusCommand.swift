import ArgumentParser
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulWire
import HaulWireMapping

extension HaulCommand {
    /// `haul status`: the daemon's facts.
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status",
            abstract: "Show the daemon's state.",
            discussion: Examples.block([
                ("haul status", "limits, counts, the network"),
                ("haul status --json", "the same, for scripts"),
            ])
        )

        @Flag(help: "Print as JSON.")
        var json = false

        func run() async throws {
            try await withDaemon(autoStart: false) { client in
                let status = try await client.status()
                if json {
                    print(try DaemonOutput.json(status))
                    return
                }
                let counts = TaskState.allCases.compactMap { state in
                    status.tasks[state.rawValue].map { "\($0) \(state.rawValue)" }
                }
                print("pid:      \(status.pid)")
                print("uptime:   \(Format.duration(.seconds(Int64(status.uptimeSeconds))))")
                print("socket:   \(status.socket)")
                if let listen = status.listen {
                    print("tcp:      \(listen) (token in \(DaemonPaths(home: HaulHome(path: status.home)).token))")
                }
                print("store:    \(status.store)")
                print("tasks:    \(counts.isEmpty ? "none" : counts.joined(separator: ", "))")
                if let fleet = status.fleet {
                    // The counts are the fleet's; the limit is this node's own.
                    let here = fleet.nodes.first { $0.name == fleet.node }?.leases ?? 0
                    print(
                        "running:  \(status.running) in the fleet, \(here) here of at most \(status.maxConcurrentDownloads); \(status.waiting) waiting"
                    )
                } else {
                    print(
                        "running:  \(status.running) of at most \(status.maxConcurrentDownloads), \(status.waiting) waiting"
                    )
                }
                print(
                    "per host: \(status.maxDownloadsPerHost) downloads, \(status.maxConnectionsPerHost) connections at most"
                )
                print("speed:    \(Format.speed(status.bytesPerSecond))")
                if let network = status.network {
                    var line = "network:  "
                    if let interface = network.interface {
                        line += "default route via \(interface) (\(network.sourceAddress ?? "?"))"
                        line += network.usable ? "" : ", down"
                        line += network.metered ? ", metered" : ""
                    } else {
                        line += "no default route"
                    }
                    if network.waitingTasks > 0 { line += "; \(network.waitingTasks) waiting for it" }
                    print(line)
                    var metered = "metered:  \(network.allowMetered ? "allowed" : "not allowed")"
                    metered += " (interfaces \(network.meteredInterfaces.joined(separator: ","))"
                    if let system = network.meteredBySystem, !system.isEmpty {
                        metered += "; NetworkManager says \(system.joined(separator: ","))"
                    }
                    print(metered + ")")
                }
                if let fleet = status.fleet { print(DaemonOutput.fleet(fleet)) }
            }
        }
    }
}
