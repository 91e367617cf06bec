import ArgumentParser
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulWire

extension HaulCommand.Daemon {
    /// `haul daemon drain`: a fleet's node out of service, its downloads continued elsewhere.
    struct Drain: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "drain",
            abstract: "In a fleet: take a node out of service; its downloads continue on the other nodes.",
            discussion: """
                The node takes no new download and hands back those it runs at a checkpoint, so \
                that the other nodes continue each one with a ranged request (with --finish, it \
                lets them finish first); then it stops and leaves the fleet. For an upgrade, drain \
                the nodes one by one and start each again. Through any node, for any node.

                \(Examples.block([
                    ("haul daemon drain", "this daemon's node"),
                    ("haul daemon drain --node n2", "node n2, through this daemon"),
                    ("haul daemon drain --finish --no-wait", "let its downloads finish; do not wait"),
                ]))
                """
        )

        @Option(help: "The node to drain (default: this daemon's).")
        var node: String?

        @Flag(help: "Let the node's running downloads finish before it stops, instead of handing them back.")
        var finish = false

        @Flag(help: "Return once the node was asked, without waiting for it to leave.")
        var noWait = false

        func validate() throws {
            if let node { try DownloadRequest.validateNodeName(node) }
        }

        func run() async throws {
            try await withDaemon(autoStart: false) { client in
                guard let fleet = try await client.status().fleet else { throw NodeDrain.notInFleet }
                let node = node ?? fleet.node
                try await client.drain(node: node, finishing: finish)
                guard !noWait else {
                    CLIError.note(
                        "Node \(node) drains: it takes no new download\(finish ? "" : " and hands back what it runs")."
                    )
                    return
                }
                CLIError.note(
                    "Node \(node) drains; waiting for it to leave the fleet (Ctrl-C stops waiting, not the drain)."
                )
                try await Self.waitUntilLeft(node, this: node == fleet.node, client)
                CLIError.note("Node \(node) drained and left the fleet.")
            }
        }

        /// Waits until `node` has left: this daemon's process ended, or the fleet says so.
        private static func waitUntilLeft(_ node: String, this: Bool, _ client: HaulClient) async throws {
            let paths = DaemonPaths(home: HaulHome.resolve())
            while !Task.isCancelled {
                if this {
                    guard DaemonLock.holder(paths.lock) != nil else { return }
                } else if let fleet = try await client.status().fleet,
                    let state = fleet.nodes.first(where: { $0.name == node })
                {
                    if state.stoppedAt != nil { return }
                    if Date().timeIntervalSince(state.heartbeatAt) > fleet.leaseSeconds * 2 {
                        throw HaulError(
                            .busy,
                            "Node \(node) went silent while it drained (it stopped or lost the database)",
                            hint:
                                "Its downloads go to the other nodes as its leases run out; haul status shows the fleet"
                        )
                    }
                }
                try await Task.sleep(for: .milliseconds(250))
            }
        }
    }
}
