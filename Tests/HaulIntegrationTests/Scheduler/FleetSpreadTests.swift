import Foundation
import HaulPostgres
import HaulTestSupport
import HaulTesting
import HaulWire
import Testing

@testable import Haul

/// The fleet spreads its work: each node runs what its own capacity (its `-j`) allows, and
/// when the fleet's cap leaves less room than the nodes have, each takes its part by free
/// capacity — before, the limits were the fleet's only, and the first node to ask took
/// them all (`{'n3': 6}` sampled ten times of ten).
@Suite("Fleet: work on every node", .postgresServer, .timeLimit(.minutes(10)))
struct FleetSpreadTests {
    @Test("three nodes at -j 2, no fleet cap, twelve slow downloads: two run on each node, never more on one")
    func ownCapacity() async throws {
        try await spread(limit: 2, cap: nil, expected: ["a": 2, "b": 2, "c": 2])
    }

    @Test("three nodes at -j 4 under a fleet cap of 3: one runs on each, three in all")
    func fleetCapShared() async throws {
        try await spread(limit: 4, cap: 3, expected: ["a": 1, "b": 1, "c": 1])
    }

    @Test(
        "a node given nothing for a lease's time, its part of the work another node's that never takes it, takes one then and not before; a node at its limit still tells a new one"
    )
    func overdue() async throws {
        try await FleetQueueTests.withDatabase { client in
            let clock = TestClock()
            let lease = Duration.seconds(60)
            let a = try await FleetQueueTests.node(client, "a", lease: lease)
            let b = try await FleetQueueTests.node(client, "b", lease: lease, clock: clock)
            try await a.saveFleetCaps(API.FleetCaps(maxConcurrentDownloads: 2))
            // a: alive, 4 free, and it never asks for work.
            _ = try await a.fleet.heartbeat(bytesPerSecond: 0, capacity: 4, duration: lease, renewing: [])
            let ids = try await FleetQueueTests.add(a, 3)
            // b's part of the 2 the cap allows, among 4 + 3 free: one.
            #expect(try await b.claim(wanted: 3, maxRunning: 3, perHost: 3) == [ids[0]])
            // The last place under the cap is a's part (4 free against b's 2).
            #expect(try await b.claim(wanted: 2, maxRunning: 3, perHost: 3) == [])
            clock.advance(by: lease - .milliseconds(1))
            #expect(try await b.claim(wanted: 2, maxRunning: 3, perHost: 3) == [])
            clock.advance(by: .milliseconds(1))
            #expect(try await b.claim(wanted: 2, maxRunning: 3, perHost: 3) == [ids[1]])
            // a, wanting nothing, tells its new limit: 1. The next place under a cap of 3 is
            // then b's (2 free of 4 against a's 1), which a's 4 free would have made a's.
            try await a.saveFleetCaps(API.FleetCaps(maxConcurrentDownloads: 3))
            #expect(try await a.claim(wanted: 0, maxRunning: 1, perHost: 1) == [])
            let nodes = try await a.fleet.report.nodes()
            #expect(nodes.first { $0.name == "a" }?.maxConcurrentDownloads == 1)
            #expect(try await b.claim(wanted: 2, maxRunning: 4, perHost: 4) == [ids[2]])
        }
    }

    @Test(
        "the fleet's rate cap is shared among the nodes transferring: evenly, a slower node's rest to the other; lifted, each node's own limit holds again"
    )
    func rateCapShared() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            for index in 0..<2 {
                server.set("/r\(index)", .init(size: 64 << 20, seed: UInt64(80 + index), bytesPerSecond: 256 << 10))
            }
            // Short leases: a beat a second, so each node hears its part soon.
            try await FleetManagerTests.withNodes(["a", "b"], lease: .seconds(3)) { nodes in
                try await nodes[0].saveFleetCaps(API.FleetCaps(overallRateLimit: 600_000))
                var configurations = nodes.map { FleetManagerTests.configuration($0, limit: 1) }
                configurations[0].downloader.overallRateLimit = 100_000  // a's own link.
                let a = try DownloadManager(configuration: configurations[0])
                let b = try DownloadManager(configuration: configurations[1])
                let runs = [Task { try await a.run() }, Task { try await b.run() }]
                let added = try await a.download(
                    (0..<2).map { DownloadRequest(url: server.url("/r\($0)"), destination: .directory(temp.path)) }
                )
                #expect(
                    try await waitUntil {
                        let (onA, onB) = (await a.runningTaskIDs.count, await b.runningTaskIDs.count)
                        return onA == 1 && onB == 1
                    }
                )
                // Both transferring: a keeps its own 100,000; b has the other 500,000.
                #expect(try await waitUntil { a.effectiveRateLimit == 100_000 && b.effectiveRateLimit == 500_000 })
                #expect(a.overallRateLimit == 100_000 && b.overallRateLimit == nil)
                // a's own limit lifted: an even part each.
                try await a.setOverallRateLimit(nil)
                #expect(try await waitUntil { a.effectiveRateLimit == 300_000 && b.effectiveRateLimit == 300_000 })
                // The cap lifted: no limit on either.
                try await nodes[1].saveFleetCaps(API.FleetCaps(overallRateLimit: 0))
                #expect(try await waitUntil { a.effectiveRateLimit == nil && b.effectiveRateLimit == nil })
                for task in added { try await a.cancel(task.id) }
                await a.shutdown()
                await b.shutdown()
                for run in runs { try await run.value }
            }
        }
    }

    /// Three nodes at `limit` each (and the fleet's `cap`), twelve slow downloads: they run
    /// as `expected` says, node by node, and no node ever runs more.
    private func spread(limit: Int, cap: Int?, expected: [String: Int]) async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            // Long enough to be sampled running, however loaded the machine.
            for index in 0..<12 {
                server.set("/s\(index)", .init(size: 4 << 20, seed: UInt64(index), bytesPerSecond: 256 << 10))
            }
            try await FleetManagerTests.withNodes(["a", "b", "c"]) { nodes in
                if let cap { try await nodes[0].saveFleetCaps(API.FleetCaps(maxConcurrentDownloads: cap)) }
                var managers: [DownloadManager] = []
                var runs: [Task<Void, any Error>] = []
                for node in nodes {
                    let manager = try DownloadManager(
                        configuration: FleetManagerTests.configuration(node, limit: limit)
                    )
                    managers.append(manager)
                    runs.append(Task { try await manager.run() })
                }
                // Every node has said it is alive, with its capacity, before any work arrives.
                #expect(
                    try await waitUntil {
                        try await nodes[0].fleet.report.nodes().filter { $0.maxConcurrentDownloads == limit }.count == 3
                    }
                )
                let added = try await managers[0].download(
                    (0..<12).map { DownloadRequest(url: server.url("/s\($0)"), destination: .directory(temp.path)) }
                )
                var owners: [String: Int] = [:]
                let total = expected.values.reduce(0, +)
                #expect(
                    try await waitUntil {
                        owners = try await Self.owners(nodes[0])
                        return owners.values.reduce(0, +) == total
                    },
                    "\(owners)"
                )
                #expect(owners == expected)
                // And it stays so while they run: a node never takes more.
                for _ in 0..<5 {
                    owners = try await Self.owners(nodes[0])
                    for (node, count) in owners { #expect(count <= expected[node, default: 0], "\(owners)") }
                    for manager in managers { #expect(await manager.runningTaskIDs.count <= limit) }
                }
                for task in added { try await managers[0].cancel(task.id) }
                for manager in managers { await manager.shutdown() }
                for run in runs { try await run.value }
            }
        }
    }

    /// The running tasks per node, as the fleet's queue has them.
    static func owners(_ node: PostgresStore) async throws -> [String: Int] {
        let entries = try await node.fleet.report.entries()
        return Dictionary(
            entries.filter { $0.state == "running" }.compactMap(\.owner).map { ($0, 1) },
            uniquingKeysWith: +
        )
    }
}
