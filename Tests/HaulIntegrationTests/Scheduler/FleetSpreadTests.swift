import Foundation
import HaulPostgres
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// The fleet spreads its work: each node takes at most its even share of the fleet's limit
/// among the nodes alive, so three nodes at `-j 6` run two downloads each — before, the
/// first node to ask took all six (`{'n3': 6}` sampled ten times of ten).
@Suite("Fleet: work on every node", .postgresServer, .timeLimit(.minutes(10)))
struct FleetSpreadTests {
    @Test("three nodes, a fleet limit of 6, twelve slow downloads: two run on each node, never more on one")
    func evenShares() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            // Long enough to be sampled running, however loaded the machine.
            for index in 0..<12 {
                server.set("/s\(index)", .init(size: 4 << 20, seed: UInt64(index), bytesPerSecond: 256 << 10))
            }
            try await FleetManagerTests.withNodes(["a", "b", "c"]) { nodes in
                var managers: [DownloadManager] = []
                var runs: [Task<Void, any Error>] = []
                for node in nodes {
                    let manager = try DownloadManager(configuration: FleetManagerTests.configuration(node, limit: 6))
                    managers.append(manager)
                    runs.append(Task { try await manager.run() })
                }
                // Every node has said it is alive before any work arrives.
                #expect(try await waitUntil { try await nodes[0].fleet.report.nodes().count == 3 })
                let added = try await managers[0].download(
                    (0..<12).map { DownloadRequest(url: server.url("/s\($0)"), destination: .directory(temp.path)) }
                )
                var owners: [String: Int] = [:]
                #expect(
                    try await waitUntil {
                        let entries = try await nodes[0].fleet.report.entries()
                        owners = Dictionary(
                            entries.filter { $0.state == "running" }.compactMap(\.owner).map { ($0, 1) },
                            uniquingKeysWith: +
                        )
                        return owners.values.reduce(0, +) == 6
                    },
                    "\(owners)"
                )
                #expect(owners == ["a": 2, "b": 2, "c": 2])
                // And it stays so while they run: a node never takes a third.
                for _ in 0..<5 {
                    let entries = try await nodes[0].fleet.report.entries()
                    for node in ["a", "b", "c"] {
                        #expect(entries.filter { $0.state == "running" && $0.owner == node }.count <= 2)
                    }
                }
                for task in added { try await managers[0].cancel(task.id) }
                for manager in managers { await manager.shutdown() }
                for run in runs { try await run.value }
            }
        }
    }
}
