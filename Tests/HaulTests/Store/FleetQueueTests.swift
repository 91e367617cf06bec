import Foundation
import Logging
import PostgresNIO
import Testing

@testable import Haul
@testable import HaulPostgres

/// The fleet's queue on a real PostgreSQL server (PostgresServer): migrations by one node
/// at a time, leases in queue order within the fleet-wide limit and the per-host cap, and
/// fencing — a node whose lease ran out and was taken over writes nothing.
@Suite("Fleet queue on PostgreSQL", .serialized)
struct FleetQueueTests {
    static func queue(_ client: PostgresClient, node: String) -> FleetQueue {
        var logger = Logger(label: "haul.fleet.test")
        logger.logLevel = .critical
        // Test names are valid.
        return try! FleetQueue(client: client, node: node, logger: logger)
    }

    @Test("three nodes migrating at once: one migrates, the others find it done; a newer schema is refused")
    func migrations() async throws {
        try await PostgresServer.with { server in
            try await server.withDatabase("migrations") { client in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for node in ["a", "b", "c"] {
                        group.addTask { try await Self.queue(client, node: node).migrate() }
                    }
                    try await group.waitForAll()
                }
                let versions = try await client.query("SELECT version FROM haul_migration ORDER BY version")
                    .decode(Int.self).all()
                #expect(versions == Array(1...FleetQueue.migrations.count))
                try await client.query("INSERT INTO haul_migration (version) VALUES (99)")
                await #expect {
                    try await Self.queue(client, node: "a").migrate()
                } throws: { error in
                    (error as? HaulError)?.message.contains("set up by a newer Haul (schema 99") == true
                }
            }
        }
    }

    @Test("a database at the first schema is brought to the last, keeping its tasks")
    func upgrade() async throws {
        try await PostgresServer.with { server in
            try await server.withDatabase("upgrade") { client in
                try await client.query(
                    "CREATE TABLE haul_migration (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
                )
                for sql in FleetQueue.migrations[0] { try await client.query(PostgresQuery(unsafeSQL: sql)) }
                try await client.query("INSERT INTO haul_migration (version) VALUES (1)")
                let id = UUID()
                try await client.query("INSERT INTO fleet_task (id, host) VALUES (\(id), 'h:80')")
                let queue = Self.queue(client, node: "a")
                try await queue.migrate()
                let versions = try await client.query("SELECT version FROM haul_migration ORDER BY version")
                    .decode(Int.self).all()
                #expect(versions == Array(1...FleetQueue.migrations.count))
                #expect(try await queue.entries().map(\.id) == [id])
                _ = try await queue.heartbeat(bytesPerSecond: 5, duration: .seconds(10))
                #expect(try await queue.nodes().map(\.bytesPerSecond) == [5])
            }
        }
    }

    @Test("node names: 1 to 64 letters, digits, '.', '_' or '-'")
    func nodeNames() throws {
        for name in ["a", "worker-7.example.org", String(repeating: "n", count: 64)] {
            try FleetQueue.validateNodeName(name)
        }
        for name in ["", "has space", "semi;colon", String(repeating: "n", count: 65), "ünïcode"] {
            #expect(throws: HaulError.self) { try FleetQueue.validateNodeName(name) }
        }
    }

    @Test(
        "heartbeats renew every lease a node holds in one go and list the nodes; leaving gives its leases back at once"
    )
    func heartbeatsAndLeaving() async throws {
        try await PostgresServer.with { server in
            try await server.withDatabase("nodes") { client in
                let (a, b) = (Self.queue(client, node: "a"), Self.queue(client, node: "b"))
                try await a.migrate()
                let ids = (0..<4).map { _ in UUID() }
                try await a.enqueue(ids.map { ($0, "h:80", 0) })
                let mine = try await a.acquire(wanted: 2, maxRunning: 3, perHost: 3, duration: .seconds(30))
                let theirs = try await b.acquire(wanted: 2, maxRunning: 3, perHost: 3, duration: .seconds(60))
                #expect(mine.count == 2 && theirs.count == 1)
                let renewed = try await a.heartbeat(bytesPerSecond: 1000, duration: .seconds(60))
                #expect(Set(renewed.map(\.task)) == Set(mine.map(\.task)))
                #expect(
                    zip(
                        renewed.sorted { $0.task.uuidString < $1.task.uuidString },
                        mine.sorted { $0.task.uuidString < $1.task.uuidString }
                    )
                    .allSatisfy { $0.fence == $1.fence && $0.expires > $1.expires }
                )
                var nodes = try await a.nodes()
                #expect(nodes.map(\.name) == ["a"], "b has not beaten yet")
                #expect(nodes.first?.leases == 2 && nodes.first?.bytesPerSecond == 1000)
                _ = try await b.heartbeat(bytesPerSecond: 0, duration: .seconds(60))
                nodes = try await a.nodes()
                #expect(nodes.map(\.name) == ["a", "b"] && nodes.map(\.leases) == [2, 1])

                // a leaves: its two tasks are free at once, for b, with the next fence.
                #expect(try await a.leave() == 2)
                let taken = try await b.acquire(wanted: 3, maxRunning: 3, perHost: 3, duration: .seconds(60))
                #expect(Set(taken.map(\.task)) == Set(mine.map(\.task)))
                #expect(taken.allSatisfy { $0.fence == 2 })
                // What a still holds after leaving: nothing, and its old leases write nothing.
                #expect(try await a.checkpoint(mine[0], committed: 10) == false)
                nodes = try await a.nodes()
                #expect(nodes.first { $0.name == "a" }?.stoppedAt != nil)
                #expect(nodes.map(\.leases) == [0, 3])
            }
        }
    }

    @Test("leases in queue order: priority first, then the order queued; never one task twice")
    func queueOrder() async throws {
        try await PostgresServer.with { server in
            try await server.withDatabase("order") { client in
                let queue = Self.queue(client, node: "a")
                try await queue.migrate()
                let ids = (0..<6).map { _ in UUID() }
                try await queue.enqueue([
                    (ids[0], "h:80", 0), (ids[1], "h:80", 0), (ids[2], "h:80", 5), (ids[3], "h:80", 0),
                    (ids[4], "h:80", 5), (ids[5], "h:80", -1),
                ])
                // Enqueued again: stays where it was.
                try await queue.enqueue([(ids[0], "h:80", 9)])
                let first = try await queue.acquire(wanted: 3, maxRunning: 10, perHost: 10, duration: .seconds(30))
                #expect(first.map(\.task) == [ids[2], ids[4], ids[0]])
                #expect(first.allSatisfy { $0.fence == 1 })
                let rest = try await queue.acquire(wanted: 10, maxRunning: 10, perHost: 10, duration: .seconds(30))
                #expect(rest.map(\.task) == [ids[1], ids[3], ids[5]])
                #expect(
                    try await queue.acquire(wanted: 10, maxRunning: 10, perHost: 10, duration: .seconds(30)).isEmpty
                )
            }
        }
    }

    @Test("three nodes taking leases at once: disjoint, never over the fleet's limit or a host's cap")
    func limitsHoldAcrossNodes() async throws {
        try await PostgresServer.with { server in
            try await server.withDatabase("limits") { client in
                let nodes = ["a", "b", "c"].map { Self.queue(client, node: $0) }
                try await nodes[0].migrate()
                let hosts = ["one:80", "two:80", "three:80"]
                try await nodes[0].enqueue((0..<90).map { (UUID(), hosts[$0 % 3], 0) })
                let (maxRunning, perHost) = (7, 3)
                // Each node takes what it may, finishes what it holds, and takes again, until
                // the queue is empty; after every acquisition the fleet is counted.
                let taken = try await withThrowingTaskGroup(of: [FleetQueue.Lease].self) { group in
                    for node in nodes {
                        group.addTask {
                            var mine: [FleetQueue.Lease] = []
                            while true {
                                let leases = try await node.acquire(
                                    wanted: 3,
                                    maxRunning: maxRunning,
                                    perHost: perHost,
                                    duration: .seconds(60)
                                )
                                let running = try await client.query(
                                    "SELECT host, count(*) FROM fleet_task WHERE state = 'running' GROUP BY host"
                                ).decode((String, Int).self).all()
                                #expect(running.map(\.1).reduce(0, +) <= maxRunning)
                                #expect(running.allSatisfy { $0.1 <= perHost }, "\(running)")
                                if leases.isEmpty {
                                    let left = try await client.query(
                                        "SELECT count(*) FROM fleet_task WHERE state IN ('queued', 'running')"
                                    ).decode(Int.self).all()
                                    if left == [0] { return mine }
                                    await Task.yield()
                                    continue
                                }
                                for lease in leases {
                                    #expect(try await node.finish(lease, as: .completed))
                                }
                                mine += leases
                            }
                        }
                    }
                    var all: [FleetQueue.Lease] = []
                    for try await leases in group { all += leases }
                    return all
                }
                #expect(taken.count == 90)
                #expect(Set(taken.map(\.task)).count == 90, "a task was leased twice")
                let entries = try await nodes[0].entries()
                #expect(entries.allSatisfy { $0.state == "completed" && $0.fence == 1 })
            }
        }
    }

    @Test("fencing: a node past its lease writes nothing once another took over; the new holder's writes count")
    func fencing() async throws {
        try await PostgresServer.with { server in
            try await server.withDatabase("fencing") { client in
                let (a, b) = (Self.queue(client, node: "a"), Self.queue(client, node: "b"))
                try await a.migrate()
                let id = UUID()
                try await a.enqueue([(id, "h:80", 0)])
                let stale = try #require(
                    try await a.acquire(wanted: 1, maxRunning: 5, perHost: 5, duration: .milliseconds(300)).first
                )
                #expect(try await a.checkpoint(stale, committed: 1000))
                // B takes nothing while A's lease holds; once it has run out (by the
                // database's clock), B takes the task with the next fence.
                #expect(try await b.acquire(wanted: 1, maxRunning: 5, perHost: 5, duration: .seconds(60)).isEmpty)
                var current: FleetQueue.Lease?
                #expect(
                    try await waitUntil(timeout: .seconds(30), every: .milliseconds(50)) {
                        current = try await b.acquire(wanted: 1, maxRunning: 5, perHost: 5, duration: .seconds(60))
                            .first
                        return current != nil
                    }
                )
                let fresh = try #require(current)
                #expect(fresh.task == id && fresh.fence == stale.fence + 1)
                // A wakes up: every write it tries is refused and changes nothing.
                #expect(try await a.checkpoint(stale, committed: 5000) == false)
                #expect(try await a.renew([stale], duration: .seconds(60)).isEmpty)
                #expect(try await a.finish(stale, as: .completed) == false)
                #expect(try await a.release(stale) == false)
                var entry = try #require(try await a.entries().first)
                #expect(entry.owner == "b" && entry.state == "running" && entry.committed == 1000)
                // B's writes count.
                #expect(try await b.checkpoint(fresh, committed: 2000))
                #expect(try await b.renew([fresh], duration: .seconds(60)).map(\.task) == [id])
                #expect(try await b.finish(fresh, as: .completed))
                entry = try #require(try await a.entries().first)
                #expect(entry.state == "completed" && entry.committed == 2000 && entry.owner == nil)
            }
        }
    }

    @Test("a node stopping cleanly gives its leases back: another takes them at once, in their places")
    func release() async throws {
        try await PostgresServer.with { server in
            try await server.withDatabase("release") { client in
                let (a, b) = (Self.queue(client, node: "a"), Self.queue(client, node: "b"))
                try await a.migrate()
                let ids = (0..<3).map { _ in UUID() }
                try await a.enqueue(ids.map { ($0, "h:80", 0) })
                let held = try await a.acquire(wanted: 2, maxRunning: 2, perHost: 2, duration: .seconds(60))
                #expect(held.map(\.task) == Array(ids[0..<2]))
                #expect(try await b.acquire(wanted: 2, maxRunning: 2, perHost: 2, duration: .seconds(60)).isEmpty)
                for lease in held { #expect(try await a.release(lease)) }
                let taken = try await b.acquire(wanted: 2, maxRunning: 2, perHost: 2, duration: .seconds(60))
                #expect(taken.map(\.task) == Array(ids[0..<2]))
                #expect(taken.map(\.fence) == [2, 2])
            }
        }
    }
}

extension AsyncSequence {
    /// Every element, in order.
    fileprivate func all() async throws -> [Element] {
        var elements: [Element] = []
        for try await element in self { elements.append(element) }
        return elements
    }
}
