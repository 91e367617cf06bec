import Foundation
import HaulTestSupport
import HaulTesting
import HaulWire
import Logging
import PostgresNIO
import Synchronization
import Testing

@testable import Haul
@testable import HaulPostgres

/// The fleet's queue on a real PostgreSQL server (PostgresServer): migrations by one node
/// at a time, leases in queue order within the fleet-wide limit and the per-host cap, and
/// fencing — a node whose lease ran out and was taken over writes nothing. Each node is a
/// PostgresStore of its own on one database, as each daemon of a fleet is.
@Suite("Fleet queue on PostgreSQL", .postgresServer, .timeLimit(.minutes(20)))
struct FleetQueueTests {
    static var logger: Logger {
        var logger = Logger(label: "haul.fleet.test")
        logger.logLevel = .critical
        return logger
    }

    static func queue(_ client: PostgresClient, node: String) -> FleetQueue {
        // Test names are valid.
        try! FleetQueue(client: client, node: node, logger: logger)
    }

    /// A client of a new database on the suite's server (nothing when there is none).
    static func withDatabase(_ body: (PostgresClient) async throws -> Void) async throws {
        guard let server = PostgresServer.current else { return }
        let location = try await server.newDatabase()
        try await server.withClient(database: location.database, body)
    }

    /// A node: a store of its own on the database, its book on `clock`.
    static func node(
        _ client: PostgresClient,
        _ name: String,
        lease: Duration = .seconds(60),
        clock: any Clock<Duration> = ContinuousClock()
    ) async throws -> PostgresStore {
        try await PostgresStore(client: client, node: name, leaseDuration: lease, clock: clock, logger: logger)
    }

    /// Adds the daemon's downloads, one per host in turn, in this order; their ids.
    static func add(_ store: PostgresStore, _ count: Int, hosts: [String] = ["h"]) async throws -> [UUID] {
        var ids: [UUID] = []
        for index in 0..<count {
            let record = StoreRecords.record("http://\(hosts[index % hosts.count])/\(index)", into: "/tmp/fleet")
            ids.append(try await store.findOrInsert(record, reAdd: StoreRecords.plainReAdd) { _ in }.record.id)
        }
        return ids
    }

    @Test("three nodes migrating at once: one migrates, the others find it done; a newer schema is refused")
    func migrations() async throws {
        try await Self.withDatabase { client in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for node in ["a", "b", "c"] {
                    group.addTask { try await Self.queue(client, node: node).migrate() }
                }
                try await group.waitForAll()
            }
            let versions = try await client.query("SELECT version FROM haul_migration ORDER BY version")
                .decode(Int.self).collected()
            #expect(versions == Array(1...FleetQueue.migrations.count))
            try await client.query("INSERT INTO haul_migration (version) VALUES (99)")
            await #expect {
                try await Self.queue(client, node: "a").migrate()
            } throws: { error in
                (error as? HaulError)?.message.contains("set up by a newer Haul (schema 99") == true
            }
        }
    }

    @Test("a database at the store's first schema is brought to the last, keeping its tasks")
    func upgrade() async throws {
        try await Self.withDatabase { client in
            try await client.query(
                "CREATE TABLE haul_migration (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
            )
            for version in 1...3 {
                for sql in FleetQueue.migrations[version - 1] { try await client.query(PostgresQuery(unsafeSQL: sql)) }
                try await client.query("INSERT INTO haul_migration (version) VALUES (\(version))")
            }
            let id = UUID()
            try await client.query(
                """
                INSERT INTO haul_task (id, session, url, directory, "explicitName", "requestHeaders", overwrite, state,
                    priority, "createdAt", "queuedAt", "updatedAt", "queueOrder", background, "allowsMetered",
                    "checkNewer", "continuesExisting", "followsMetalink")
                VALUES (\(id), 'default', 'http://h/x', '/tmp', false, '[]', false, 'queued', 0,
                    '2026-11-25 00:00:00.000', '2026-11-25 00:00:00.000', '2026-11-25 00:00:00.000', 1, true, true,
                    false, false, true)
                """
            )
            // The limits as a fleet kept them before each node had its own: -j 12 and
            // --max-per-host 4 for the fleet, a rate and connections each node applied.
            try await client.query(
                """
                INSERT INTO haul_setting (name, value) VALUES ('maxConcurrentDownloads', 12),
                    ('maxConnectionsPerHost', 4), ('overallRateLimit', 1048576), ('hostConnections', 6),
                    ('giveUpAfter', 600)
                """
            )
            try await client.query("INSERT INTO fleet_node (name) VALUES ('old')")
            let queue = Self.queue(client, node: "a")
            try await queue.migrate()
            // The fleet's downloads became its caps; the rate and connections the known node's.
            let upgraded = try await Self.node(client, "old")
            #expect(try await upgraded.fleetCaps() == API.FleetCaps(maxConcurrentDownloads: 12, maxDownloadsPerHost: 4))
            let (limits, rejected) = try await upgraded.storedLimits()
            #expect(rejected.isEmpty)
            #expect(
                limits
                    == StoredLimits(maxConnectionsPerHost: 6, overallRateLimit: 1_048_576, giveUpAfter: 600)
            )
            #expect(try await Self.node(client, "new").storedLimits().limits == StoredLimits(giveUpAfter: 600))
            let versions = try await client.query("SELECT version FROM haul_migration ORDER BY version")
                .decode(Int.self).collected()
            #expect(versions == Array(1...FleetQueue.migrations.count))
            #expect(try await queue.report.entries().map(\.id) == [id])
            _ = try await queue.heartbeat(bytesPerSecond: 5, duration: .seconds(10), renewing: [])
            #expect(try await queue.report.nodes().map(\.bytesPerSecond) == [5, 0])
            // Times and JSON in PostgreSQL's own types, read back as they were written.
            let types = try await client.query(
                """
                SELECT column_name, data_type FROM information_schema.columns
                WHERE table_name = 'haul_task' AND column_name IN ('createdAt', 'nextTryAt', 'requestHeaders', 'sources')
                ORDER BY column_name
                """
            ).decode((String, String).self).collected()
            #expect(types.map(\.1) == ["timestamp with time zone", "timestamp with time zone", "jsonb", "jsonb"])
            let record = try await Self.node(client, "b").task(id: id)
            #expect(record?.createdAt == StoreDate.date("2026-11-25 00:00:00.000"))
            #expect(record?.requestHeaders.isEmpty == true)
            await #expect(throws: (any Error).self, "a state no Haul knows is refused") {
                try await client.query("UPDATE haul_task SET state = 'bogus' WHERE id = \(id)")
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
        try await Self.withDatabase { client in
            let (a, b) = (try await Self.node(client, "a"), try await Self.node(client, "b"))
            let ids = try await Self.add(a, 4)
            let mine = try await a.fleet.acquire(wanted: 2, capacity: 3, perHost: 3, duration: .seconds(30))
            let theirs = try await b.fleet.acquire(wanted: 1, capacity: 3, perHost: 3, duration: .seconds(60))
            #expect(mine.map(\.task) == Array(ids[0..<2]) && theirs.map(\.task) == [ids[2]])
            let renewed = try await a.fleet.heartbeat(bytesPerSecond: 1000, duration: .seconds(60), renewing: mine)
            #expect(Set(renewed.map(\.task)) == Set(mine.map(\.task)))
            #expect(
                zip(
                    renewed.sorted { $0.task.uuidString < $1.task.uuidString },
                    mine.sorted { $0.task.uuidString < $1.task.uuidString }
                )
                .allSatisfy { $0.fence == $1.fence && $0.expires > $1.expires }
            )
            var nodes = try await a.fleet.report.nodes()
            #expect(nodes.map(\.name) == ["a"], "b has not beaten yet")
            #expect(nodes.first?.leases == 2 && nodes.first?.bytesPerSecond == 1000)
            _ = try await b.fleet.heartbeat(bytesPerSecond: 0, duration: .seconds(60), renewing: theirs)
            nodes = try await a.fleet.report.nodes()
            #expect(nodes.map(\.name) == ["a", "b"] && nodes.map(\.leases) == [2, 1])

            // a leaves: its two tasks are free at once, for b, with the next fence.
            #expect(try await a.fleet.leave() == 2)
            let taken = try await b.fleet.acquire(wanted: 3, capacity: 3, perHost: 3, duration: .seconds(60))
            #expect(Set(taken.map(\.task)) == Set(mine.map(\.task)))
            #expect(taken.allSatisfy { $0.fence == 2 })
            // What a still holds after leaving: nothing, and its old leases write nothing.
            #expect(try await a.fleet.release(mine[0]) == false)
            nodes = try await a.fleet.report.nodes()
            #expect(nodes.first { $0.name == "a" }?.stoppedAt != nil)
            #expect(nodes.map(\.leases) == [0, 3])
        }
    }

    @Test(
        "leases in queue order: priority first, then the order queued; only the daemon's waiting tasks; never one twice"
    )
    func queueOrder() async throws {
        try await Self.withDatabase { client in
            let store = try await Self.node(client, "a")
            let ids = try await Self.add(store, 6)
            try await store.setPriority(ids[2], 5)
            try await store.setPriority(ids[4], 5)
            try await store.setPriority(ids[5], -1)
            // Paused, and not the daemon's: never leased.
            try await store.setState(ids[3], .paused)
            var foreign = StoreRecords.record("http://h/foreign", into: "/tmp/fleet")
            foreign.background = false
            var reAdd = StoreRecords.plainReAdd
            reAdd.background = false
            _ = try await store.findOrInsert(foreign, reAdd: reAdd) { _ in }
            let first = try await store.claim(wanted: 3, maxRunning: 10, perHost: 10)
            #expect(first == [ids[2], ids[4], ids[0]])
            #expect(try await store.task(id: ids[2])?.state == .running)
            #expect(store.holdsClaim(ids[2]))
            let rest = try await store.claim(wanted: 10, maxRunning: 10, perHost: 10)
            #expect(rest == [ids[1], ids[5]])
            #expect(try await store.claim(wanted: 10, maxRunning: 10, perHost: 10).isEmpty)
        }
    }

    @Test(
        "a waiting task another transaction is writing (a re-add) is not passed over: no lease is taken past it until it is free"
    )
    func lockedTaskKeepsItsPlace() async throws {
        try await Self.withDatabase { client in
            let store = try await Self.node(client, "a")
            let ids = try await Self.add(store, 3)
            let (locked, lockedSink) = AsyncStream<Void>.makeStream()
            let (release, releaseSink) = AsyncStream<Void>.makeStream()
            let holder = Task {
                try await client.withConnection { connection in
                    _ = try await connection.query("BEGIN", logger: Self.logger)
                    _ = try await connection.query(
                        "SELECT 1 FROM haul_task WHERE id = \(ids[0]) FOR UPDATE",
                        logger: Self.logger
                    )
                    lockedSink.yield()
                    for await _ in release { break }
                    _ = try await connection.query("COMMIT", logger: Self.logger)
                }
            }
            for await _ in locked { break }
            #expect(try await store.claim(wanted: 3, maxRunning: 10, perHost: 10).isEmpty)
            releaseSink.yield()
            try await holder.value
            #expect(try await store.claim(wanted: 3, maxRunning: 10, perHost: 10) == ids)
        }
    }

    @Test(
        "leases whose answer came after their time (the admission lock held past a lease) are not used: none booked; the task is leased again once the database gives it back"
    )
    func lateLeases() async throws {
        try await Self.withDatabase { client in
            let lease = Duration.milliseconds(300)
            let store = try await Self.node(client, "a", lease: lease)
            let ids = try await Self.add(store, 1)
            let (locked, lockedSink) = AsyncStream<Void>.makeStream()
            let (release, releaseSink) = AsyncStream<Void>.makeStream()
            let holder = Task {
                try await client.withConnection { connection in
                    _ = try await connection.query(
                        "SELECT pg_advisory_lock(\(FleetAdmission.lock))",
                        logger: Self.logger
                    )
                    lockedSink.yield()
                    for await _ in release { break }
                    _ = try await connection.query(
                        "SELECT pg_advisory_unlock(\(FleetAdmission.lock))",
                        logger: Self.logger
                    )
                }
            }
            for await _ in locked { break }
            let asked = ContinuousClock.now
            let late = Task { try await store.claim(wanted: 1, maxRunning: 1, perHost: 1) }
            // (The store's leases run on the real clock: it takes no test clock yet.)
            #expect(try await waitUntil { ContinuousClock.now > asked + lease * 2 })
            releaseSink.yield()
            try await holder.value
            #expect(try await late.value.isEmpty)
            #expect(!store.holdsClaim(ids[0]))
            // Given back by the database when the lease ends there, then taken by a node whose
            // leases are long enough for a loaded machine's answers to come in time.
            let other = try await Self.node(client, "b")
            var again: [UUID] = []
            #expect(
                try await waitUntil {
                    again = try await other.claim(wanted: 1, maxRunning: 1, perHost: 1)
                    return !again.isEmpty
                }
            )
            #expect(again == ids && other.holdsClaim(ids[0]))
        }
    }

    @Test(
        "three nodes taking leases at once: disjoint, never over a node's own limits, the fleet's caps or a host's cap"
    )
    func limitsHoldAcrossNodes() async throws {
        try await Self.withDatabase { client in
            var nodes: [PostgresStore] = []
            for name in ["a", "b", "c"] { nodes.append(try await Self.node(client, name)) }
            _ = try await Self.add(nodes[0], 90, hosts: ["one", "two", "three"])
            // Each node's own: 4 at once, 2 per host; the fleet's: 7 at once, 3 per host.
            let (maxRunning, perHost, fleetCap, fleetPerHost) = (4, 2, 7, 3)
            try await nodes[1].saveFleetCaps(API.FleetCaps(maxConcurrentDownloads: fleetCap, maxDownloadsPerHost: 3))
            // Each node takes what it may, finishes what it holds (a fenced write), and takes
            // again, until the queue is empty; after every acquisition the fleet is counted.
            let taken = try await withThrowingTaskGroup(of: [UUID].self) { group in
                for node in nodes {
                    group.addTask {
                        var mine: [UUID] = []
                        while true {
                            let leased = try await node.claim(
                                wanted: 3,
                                maxRunning: maxRunning,
                                perHost: perHost
                            )
                            let running = try await client.query(
                                "SELECT host, owner, count(*) FROM haul_task WHERE state = 'running' GROUP BY host, owner"
                            ).decode((String, String, Int).self).collected()
                            #expect(running.map(\.2).reduce(0, +) <= fleetCap)
                            #expect(running.allSatisfy { $0.2 <= perHost }, "\(running)")
                            for host in Set(running.map(\.0)) {
                                #expect(running.filter { $0.0 == host }.map(\.2).reduce(0, +) <= fleetPerHost)
                            }
                            for owner in Set(running.map(\.1)) {
                                #expect(running.filter { $0.1 == owner }.map(\.2).reduce(0, +) <= maxRunning)
                            }
                            if leased.isEmpty {
                                let left = try await client.query(
                                    "SELECT count(*) FROM haul_task WHERE state IN ('queued', 'running')"
                                ).decode(Int.self).collected()
                                if left == [0] { return mine }
                                await Task.yield()
                                continue
                            }
                            for id in leased { try await node.setState(id, .completed) }
                            mine += leased
                        }
                    }
                }
                var all: [UUID] = []
                for try await ids in group { all += ids }
                return all
            }
            #expect(taken.count == 90)
            #expect(Set(taken).count == 90, "a task was leased twice")
            let entries = try await nodes[0].fleet.report.entries()
            #expect(entries.allSatisfy { $0.state == "completed" && $0.fence == 1 && $0.owner == nil })
        }
    }
}
