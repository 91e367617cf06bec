import Foundation
import HaulTestSupport
import HaulTesting
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

    /// A node: a store of its own on the database.
    static func node(
        _ client: PostgresClient,
        _ name: String,
        lease: Duration = .seconds(60)
    ) async throws -> PostgresStore {
        try await PostgresStore(client: client, node: name, leaseDuration: lease, logger: logger)
    }

    /// Adds the daemon's downloads, one per host in turn, in this order; their ids.
    static func add(_ store: PostgresStore, _ count: Int, hosts: [String] = ["h"]) async throws -> [UUID] {
        var ids: [UUID] = []
        for index in 0..<count {
            let record = TaskStoreTests.record("http://\(hosts[index % hosts.count])/\(index)", into: "/tmp/fleet")
            ids.append(try await store.findOrInsert(record, reAdd: TaskStoreTests.plainReAdd) { _ in }.record.id)
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
            let queue = Self.queue(client, node: "a")
            try await queue.migrate()
            let versions = try await client.query("SELECT version FROM haul_migration ORDER BY version")
                .decode(Int.self).collected()
            #expect(versions == Array(1...FleetQueue.migrations.count))
            #expect(try await queue.report.entries().map(\.id) == [id])
            _ = try await queue.heartbeat(bytesPerSecond: 5, duration: .seconds(10), renewing: [])
            #expect(try await queue.report.nodes().map(\.bytesPerSecond) == [5])
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
            let mine = try await a.fleet.acquire(wanted: 2, maxRunning: 3, perHost: 3, duration: .seconds(30))
            let theirs = try await b.fleet.acquire(wanted: 2, maxRunning: 3, perHost: 3, duration: .seconds(60))
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
            let taken = try await b.fleet.acquire(wanted: 3, maxRunning: 3, perHost: 3, duration: .seconds(60))
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
            var foreign = TaskStoreTests.record("http://h/foreign", into: "/tmp/fleet")
            foreign.background = false
            var reAdd = TaskStoreTests.plainReAdd
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
                        "SELECT pg_advisory_lock(\(FleetQueue.admissionLock))",
                        logger: Self.logger
                    )
                    lockedSink.yield()
                    for await _ in release { break }
                    _ = try await connection.query(
                        "SELECT pg_advisory_unlock(\(FleetQueue.admissionLock))",
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

    @Test("three nodes taking leases at once: disjoint, never over the fleet's limit or a host's cap")
    func limitsHoldAcrossNodes() async throws {
        try await Self.withDatabase { client in
            var nodes: [PostgresStore] = []
            for name in ["a", "b", "c"] { nodes.append(try await Self.node(client, name)) }
            _ = try await Self.add(nodes[0], 90, hosts: ["one", "two", "three"])
            let (maxRunning, perHost) = (7, 3)
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
                                "SELECT host, count(*) FROM haul_task WHERE state = 'running' GROUP BY host"
                            ).decode((String, Int).self).collected()
                            #expect(running.map(\.1).reduce(0, +) <= maxRunning)
                            #expect(running.allSatisfy { $0.1 <= perHost }, "\(running)")
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

    @Test("fencing: a node past its lease writes nothing once another took over; the new holder's writes count")
    func fencing() async throws {
        try await Self.withDatabase { client in
            let a = try await Self.node(client, "a")
            let b = try await Self.node(client, "b")
            let id = try #require(try await Self.add(a, 1).first)
            #expect(try await a.claim(wanted: 1, maxRunning: 5, perHost: 5) == [id])
            let segment = { (committed: Int64) in
                [SegmentRecord(taskID: id, ordinal: 0, start: 0, committed: committed)]
            }
            try await a.checkpoint(id, segments: segment(1000))
            // B takes nothing while A's lease holds.
            #expect(try await b.claim(wanted: 1, maxRunning: 5, perHost: 5).isEmpty)
            // A stalls past its lease (as SIGSTOP would leave it: its lease has run out by the
            // database's clock); B takes the task with the next fence.
            try await client.query("UPDATE haul_task SET lease_expires = now() - interval '1 second' WHERE id = \(id)")
            #expect(try await b.claim(wanted: 1, maxRunning: 5, perHost: 5) == [id])
            // A wakes up: every write it tries about the task is refused and changes nothing.
            let lost = await #expect(throws: HaulError.self) { try await a.checkpoint(id, segments: segment(5000)) }
            #expect(lost?.code == .revoked)
            #expect(lost?.message.contains("This node (a) no longer holds task") == true)
            #expect(!a.holdsClaim(id))
            #expect(try await a.leases.heartbeat(bytesPerSecond: 0).isEmpty)
            var entry = try #require(try await a.fleet.report.entries().first)
            #expect(entry.owner == "b" && entry.state == "running" && entry.committed == 1000 && entry.fence == 2)
            // B's writes count; its end frees the row.
            try await b.checkpoint(id, segments: segment(2000))
            #expect(try await b.leases.heartbeat(bytesPerSecond: 0).isEmpty, "b still holds it")
            try await b.setState(id, .completed)
            entry = try #require(try await a.fleet.report.entries().first)
            #expect(entry.state == "completed" && entry.committed == 2000 && entry.owner == nil)
            #expect(!b.holdsClaim(id))
        }
    }

    @Test(
        "a lease is lost when the task is paused elsewhere: its heartbeat says so, and its next write is refused"
    )
    func pausedElsewhere() async throws {
        try await Self.withDatabase { client in
            let (a, b) = (try await Self.node(client, "a"), try await Self.node(client, "b"))
            let id = try #require(try await Self.add(a, 1).first)
            #expect(try await a.claim(wanted: 1, maxRunning: 5, perHost: 5) == [id])
            // A user at node b pauses it.
            try await b.setState(id, .paused)
            #expect(try await a.leases.heartbeat(bytesPerSecond: 0) == [id])
            // A's stopping transfer records "queued": refused, so the pause stands.
            let refused = await #expect(throws: HaulError.self) { try await a.setState(id, .queued) }
            #expect(refused?.code == .revoked)
            #expect(try await b.task(id: id)?.state == .paused)
            #expect(!a.holdsClaim(id))
            // And so is every later write of that run (a segment's last checkpoint, its
            // "queued" again), until the run has ended here.
            let segments = [SegmentRecord(taskID: id, ordinal: 0, start: 0, committed: 9)]
            let again = await #expect(throws: HaulError.self) { try await a.checkpoint(id, segments: segments) }
            #expect(again?.code == .revoked)
            await #expect(throws: HaulError.self) { try await a.setState(id, .queued) }
            #expect(try await b.task(id: id)?.state == .paused)
            #expect(try await b.fleet.report.entries().first?.committed == 0)
            // Resumed elsewhere while the run here is still stopping: that run cannot take
            // the task back; another node can.
            _ = try await b.requeue(id, state: .queued)
            #expect(try await a.claim(wanted: 1, maxRunning: 5, perHost: 5).isEmpty)
            a.runEnded(id)
            #expect(try await a.claim(wanted: 1, maxRunning: 5, perHost: 5) == [id])
            #expect(try await b.fleet.report.entries().first?.fence == 2)
        }
    }

    @Test(
        "a task waiting to be tried again by a node that died is queued again two leases past its time, not before"
    )
    func retryingOfADeadNode() async throws {
        try await Self.withDatabase { client in
            // Node a's lease outlasts any pause of a loaded machine between its writes (a run
            // under load once took 49 s, and a 5 s lease ran out before a's second write).
            let (a, b) = (try await Self.node(client, "a", lease: .seconds(300)), try await Self.node(client, "b"))
            let ids = try await Self.add(a, 2)
            #expect(try await a.claim(wanted: 2, maxRunning: 5, perHost: 5) == ids)
            // Node a set both to be tried again — one due 2 minutes ago, one due now — then died.
            try await a.setRetrying(ids[0], error: "503", nextTryAt: Date() - 120, since: Date() - 200)
            try await a.setRetrying(ids[1], error: "503", nextTryAt: Date(), since: Date() - 200)
            // c, with 30 s leases: the first is more than two leases overdue, so c takes it; the
            // second waits for its own node's timer (or its time to pass two leases, a minute).
            let c = try await Self.node(client, "c", lease: .seconds(30))
            #expect(try await c.claim(wanted: 5, maxRunning: 5, perHost: 5) == [ids[0]])
            #expect(try await b.task(id: ids[1])?.state == .retrying)
            #expect(try await b.fleet.report.entries().first { $0.id == ids[0] }?.owner == "c")
        }
    }

    @Test(
        "a finished file is placed under the lease: a cancel from elsewhere lands before (nothing placed) or after (refused: it completed)"
    )
    func placingIsFenced() async throws {
        try await Self.withDatabase { client in
            let (a, b) = (try await Self.node(client, "a"), try await Self.node(client, "b"))
            let ids = try await Self.add(a, 2)
            #expect(try await a.claim(wanted: 2, maxRunning: 5, perHost: 5) == ids)
            let placed = PlacedFiles()

            // Cancelled elsewhere first: the file is not placed, the cancel stands.
            try await b.setState(ids[0], .cancelled)
            let refused = await #expect(throws: HaulError.self) {
                try await a.placeFinished(ids[0]) { placed.add(ids[0]) }
            }
            #expect(refused?.code == .revoked && placed.all.isEmpty)
            #expect(try await b.task(id: ids[0])?.state == .cancelled)

            // A cancel decided before the placement, written while it is under way (the row
            // locked): it waits for the commit, then is refused.
            let late = Mutex<Task<Void, any Error>?>(nil)
            try await a.placeFinished(ids[1]) {
                placed.add(ids[1])
                late.withLock { $0 = Task { try await b.setState(ids[1], .cancelled) } }
            }
            let cancel = try #require(late.withLock { $0 })
            let tooLate = await #expect(throws: HaulError.self) { try await cancel.value }
            #expect(tooLate?.code == .invalidArgument && tooLate?.message.contains("completed meanwhile") == true)
            #expect(placed.all == [ids[1]])
            let task = try await b.task(id: ids[1])
            #expect(task?.state == .completed && task?.partPath == nil)
            #expect(try await b.fleet.report.entries().map(\.owner) == [nil, nil])
            // The full completion that follows is a's to record.
            try await a.checkpoint(
                ids[1],
                segments: [SegmentRecord(taskID: ids[1], ordinal: 0, start: 0, committed: 7)]
            )
        }
    }

    @Test(
        "a placement is waited for even when the lease's time in this node's book runs out meanwhile: the database's fence decides, and the run learns it completed"
    )
    func slowPlacementCompletes() async throws {
        try await Self.withDatabase { client in
            let clock = TestClock()
            let lease = Duration.seconds(60)
            let a = try await PostgresStore(
                client: client,
                node: "a",
                leaseDuration: lease,
                clock: clock,
                logger: Self.logger
            )
            let ids = try await Self.add(a, 1)
            #expect(try await a.claim(wanted: 1, maxRunning: 5, perHost: 5) == ids)
            // The node's book says the lease ran out (a heartbeat late under load); the
            // database, whose clock has not moved, still grants it. A placement given up on at
            // the book's time would still commit, and its run would report a revoked claim for
            // a task the store calls completed, whose completion nobody then tells.
            clock.advance(by: lease + .seconds(1))
            let placed = PlacedFiles()
            try await a.placeFinished(ids[0]) { placed.add(ids[0]) }
            #expect(placed.all == ids)
            #expect(try await a.task(id: ids[0])?.state == .completed)
            #expect(try await a.fleet.report.entries().map(\.owner) == [nil])
        }
    }

    final class PlacedFiles: Sendable {
        private let ids = Mutex<[UUID]>([])
        func add(_ id: UUID) { ids.withLock { $0.append(id) } }
        var all: [UUID] { ids.withLock { $0 } }
    }

    @Test("a node stopping cleanly gives its leases back: another takes them at once, in their places")
    func release() async throws {
        try await Self.withDatabase { client in
            let (a, b) = (try await Self.node(client, "a"), try await Self.node(client, "b"))
            let ids = try await Self.add(a, 3)
            #expect(try await a.claim(wanted: 2, maxRunning: 2, perHost: 2) == Array(ids[0..<2]))
            #expect(try await b.claim(wanted: 2, maxRunning: 2, perHost: 2).isEmpty)
            try await a.giveBackAll()
            #expect(!a.holdsClaim(ids[0]))
            #expect(try await b.claim(wanted: 2, maxRunning: 2, perHost: 2) == Array(ids[0..<2]))
            #expect(try await b.fleet.report.entries().prefix(2).map(\.fence) == [2, 2])
        }
    }
}
