import Foundation
import HaulClient
import HaulTestSupport
import HaulWire
import Testing

@testable import Haul

extension FleetDaemonTests {
    /// `haul daemon drain`: a node out of service, node by node, without a download failing
    /// or starting again from zero.
    @Suite("Fleet of daemons: drain")
    struct Drain {
        @Test(
            "haul daemon drain on a node running 3 of 30: it exits, its three finish elsewhere from their checkpoints (ranged requests), none fails, none is fetched in full twice"
        )
        func drainHandsBack() async throws {
            try await FleetDaemonTests.withFleet(files: 30, size: 2 << 20, rate: "512k", limit: 3, perHost: 3) {
                fleet in
                let tasks = try await fleet.clients[0].add(
                    (0..<30).map { index in
                        DownloadRequest(
                            url: fleet.nginx.url("/slow/f\(index)"),
                            destination: .directory(fleet.out),
                            session: "fleet"
                        )
                    }
                )
                var held: [DownloadInfo] = []
                #expect(
                    try await waitUntil {
                        held = try await fleet.clients[1].tasks().filter { $0.node == "n0" && $0.state == .running }
                        return held.count == 3 && held.allSatisfy { $0.bytesCommitted > 0 }
                    }
                )
                let drain = try await HaulProcess.run(["daemon", "drain"], home: fleet.home(0))
                #expect(drain.status == 0, "\(drain.stderr)")
                #expect(drain.stderr.contains("Node n0 drained and left the fleet."), "\(drain.stderr)")
                // The command returned once n0's process had let go of its home: it has ended.
                let exit = try #require(await fleet.daemon(0)?.finish())
                #expect(exit.status == 0, "\(exit.stderr.suffix(2000))")
                let status = try await fleet.clients[1].status()
                let left = status.fleet?.nodes.first { $0.name == "n0" }
                #expect(left?.stoppedAt != nil && left?.drainingSince == nil && left?.leases == 0)
                let log = try await FleetDaemonTests.expectAllWholeOnce(fleet, files: 30)
                // n0's three went on elsewhere from their checkpoints.
                for task in held {
                    guard let index = tasks.firstIndex(where: { $0.id == task.id }) else { continue }
                    let resumed = log.filter { $0[0] == "/slow/f\(index)" && $0[1] == "206" }
                    #expect(resumed.count == 1 && !resumed[0][2].hasPrefix("bytes=0-"), "f\(index): \(resumed)")
                }
                let events = try await fleet.clients[1].loggedEvents(session: "fleet")
                #expect(!events.contains { $0.kind == .failed })
                let completions = events.filter { $0.kind == .completed }
                #expect(completions.count == 30 && Set(completions.compactMap(\.taskID)).count == 30)
            }
        }

        @Test(
            "haul daemon drain --node n1 --finish through another node: n1 takes nothing new, finishes what it runs (no ranged request), and leaves"
        )
        func drainFinishing() async throws {
            try await FleetDaemonTests.withFleet(files: 12, size: 1 << 20, rate: "512k", limit: 2, perHost: 2) {
                fleet in
                let tasks = try await fleet.clients[0].add(
                    (0..<12).map { index in
                        DownloadRequest(url: fleet.nginx.url("/slow/f\(index)"), destination: .directory(fleet.out))
                    }
                )
                var held: [DownloadInfo] = []
                #expect(
                    try await waitUntil {
                        held = try await fleet.clients[0].tasks().filter { $0.node == "n1" && $0.state == .running }
                        return held.count == 2
                    }
                )
                let asked = try await HaulProcess.run(
                    ["daemon", "drain", "--node", "n1", "--finish", "--no-wait"],
                    home: fleet.home(2)
                )
                #expect(asked.status == 0 && asked.stderr.contains("Node n1 drains"), "\(asked.stderr)")
                // Seen draining by every node, until it leaves.
                let draining = try await fleet.clients[0].status().fleet?.nodes.first { $0.name == "n1" }
                #expect(draining?.drainingSince != nil || draining?.stoppedAt != nil)
                // Waiting, the command returns once n1 has left the fleet: n1's process ends.
                let waited = try await HaulProcess.run(["daemon", "drain", "--node", "n1"], home: fleet.home(0))
                let exit = try #require(await fleet.daemon(1)?.finish())
                #expect(exit.status == 0, "\(exit.stderr.suffix(2000))")
                #expect(
                    waited.stderr.contains("Node n1 drained and left the fleet.")
                        || waited.stderr.contains("No node 'n1' is running in this fleet"),
                    "\(waited.stderr)"
                )
                #expect(
                    try await waitUntil { try await fleet.clients[0].tasks().allSatisfy { $0.state == .completed } }
                )
                // n1's two finished there: each fetched by one request, whole.
                let log = fleet.nginx.accessLog().filter { $0.first?.hasPrefix("/slow/") == true }
                for task in held {
                    guard let index = tasks.firstIndex(where: { $0.id == task.id }) else { continue }
                    let fetches = log.filter { $0[0] == "/slow/f\(index)" }
                    #expect(fetches.count == 1 && fetches[0][1] == "200", "f\(index): \(fetches)")
                }
                // A node not running is refused, by name.
                let again = try await HaulProcess.run(["daemon", "drain", "--node", "n1"], home: fleet.home(2))
                #expect(again.status != 0 && again.stderr.contains("No node 'n1' is running in this fleet"))
            }
        }
    }
}
