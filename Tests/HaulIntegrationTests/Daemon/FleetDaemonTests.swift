import Crypto
import Foundation
import HaulClient
import HaulPostgres
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import PostgresNIO
import Synchronization
import Testing

@testable import Haul

/// Fleet mode end to end: three `haul daemon` processes, each with a home of its own, one
/// PostgreSQL database (`--store`) and one download directory, downloading from a real
/// nginx. What the server saw decides: each file fetched in full once, never more requests
/// in flight than the fleet's limits, a killed daemon's tasks resumed elsewhere at their
/// committed offsets.
@Suite("Fleet of daemons on PostgreSQL", .postgresServer, .serialized, .timeLimit(.minutes(20)))
struct FleetDaemonTests {
    /// Three daemons on one new database (as many started at first as `initially` says;
    /// ``Fleet/start(_:)`` starts the others), their clients, and nginx; all stopped afterwards.
    final class Fleet: Sendable {
        let clients: [HaulClient]
        let store: String
        let out: String
        let nginx: ExternalServer
        private let homes: [String]
        private let arguments: @Sendable (Int) -> [String]
        private let started = Mutex<[Int: HaulProcess]>([:])

        init(
            homes: [String],
            store: String,
            out: String,
            nginx: ExternalServer,
            arguments: @escaping @Sendable (Int) -> [String]
        ) {
            self.homes = homes
            self.clients = homes.map { HaulClient(home: HaulHome(path: $0)) }
            self.store = store
            self.out = out
            self.nginx = nginx
            self.arguments = arguments
        }

        /// Starts daemon `node` and waits until it answers.
        func start(_ node: Int) async throws {
            let daemon = try HaulProcess(arguments(node), home: homes[node], environment: ["HAUL_STORE": store])
            started.withLock { $0[node] = daemon }
            let client = clients[node]
            #expect(try await waitUntil { (try? await client.status(timeout: .seconds(1))) != nil })
        }

        func daemon(_ node: Int) -> HaulProcess? { started.withLock { $0[node] } }

        /// Node `node`'s home, for `haul` commands run as its user would.
        func home(_ node: Int) -> String { homes[node] }

        /// Stops every daemon still running (SIGTERM, or SIGKILL after a failure).
        func stopAll(_ signal: Int32) async {
            for (node, daemon) in started.withLock({ $0.sorted { $0.key < $1.key } }) {
                daemon.kill(signal)
                // Bounded: a daemon that does not stop fails the test with its log, and is
                // killed, instead of holding the suite for ever.
                if await daemon.finish(within: .seconds(90)) == nil {
                    Issue.record(
                        "node n\(node) did not stop within 90 s of signal \(signal): \(daemon.currentStderr.suffix(3000))"
                    )
                }
            }
            for client in clients { try? await client.shutdown() }
        }
    }

    static func withFleet(
        files: Int,
        size: Int,
        rate: String,
        limit: Int,
        perHost: Int,
        initially: Int = 3,
        leaseSeconds: Int = 3,
        _ body: (Fleet) async throws -> Void
    ) async throws {
        guard let server = PostgresServer.current else { return }
        let location = try await server.newDatabase()
        let store = "postgres://\(PostgresServer.user)@127.0.0.1:\(server.port)/\(location.database)?sslmode=disable"
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        try await ExternalServer.with(try await ExternalServer.startNginx(slowRate: rate)) { nginx in
            for index in 0..<files {
                let bytes = TestContent.bytes(count: size, seed: UInt64(index) &+ 0xF1EE7)
                _ = FileManager.default.createFile(atPath: "\(nginx.root)/f\(index)", contents: Data(bytes))
            }
            let fleet = Fleet(
                homes: (0..<3).map { temp.file("home\($0)") },
                store: store,
                out: out,
                nginx: nginx
            ) { node in
                [
                    "daemon", "--foreground", "--node", "n\(node)", "--lease", "\(leaseSeconds)",
                    "--checkpoint-interval", "0.25",
                    "-j", "\(limit)", "--max-per-host", "\(perHost)",
                ]
            }
            do {
                for node in 0..<initially { try await fleet.start(node) }
                try await body(fleet)
            } catch {
                await fleet.stopAll(SIGKILL)
                throw error
            }
            await fleet.stopAll(SIGTERM)
        }
    }

    /// The most requests nginx was serving at once, overall and per host (from each
    /// request's end and duration in its access log).
    static func mostInFlight(_ lines: [[String]]) -> (overall: Int, perHost: [String: Int]) {
        var edges: [(time: Double, change: Int, host: String)] = []
        for line in lines where line.count >= 12 {
            guard let end = Double(line[10]), let duration = Double(line[11]) else { continue }
            edges.append((end - duration, 1, line[9]))
            edges.append((end, -1, line[9]))
        }
        // Ends before starts at the same instant: a request that ended is not in flight.
        edges.sort { $0.time != $1.time ? $0.time < $1.time : $0.change < $1.change }
        var overall = (now: 0, most: 0)
        var hosts: [String: (now: Int, most: Int)] = [:]
        for edge in edges {
            overall.now += edge.change
            overall.most = max(overall.most, overall.now)
            var host = hosts[edge.host, default: (0, 0)]
            host.now += edge.change
            host.most = max(host.most, host.now)
            hosts[edge.host] = host
        }
        return (overall.most, hosts.mapValues(\.most))
    }

    /// Waits until the fleet's `files` downloads (`/slow/f0` …) have completed, then checks
    /// that each file is whole (its SHA-256) and was fetched in full once (one request
    /// without a Range); answers nginx's log of them, for the ranged requests.
    static func expectAllWholeOnce(_ fleet: Fleet, files: Int) async throws -> [[String]] {
        #expect(
            try await waitUntil {
                let infos = try await fleet.clients[1].tasks()
                return infos.count == files && infos.allSatisfy { $0.state == .completed }
            }
        )
        for index in 0..<files {
            #expect(sha256("\(fleet.out)/f\(index)") == sha256("\(fleet.nginx.root)/f\(index)"), "f\(index)")
        }
        let log = fleet.nginx.accessLog().filter { $0.first?.hasPrefix("/slow/") == true }
        for index in 0..<files {
            let fetches = log.filter { $0[0] == "/slow/f\(index)" }
            #expect(fetches.filter { $0[2].isEmpty }.count == 1, "f\(index): \(fetches.map { $0[1...2] })")
        }
        return log
    }

    static func sha256(_ path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }

    @Test(
        "three daemons at -j 2 share one queue: 300 files from nginx complete, each fetched once, never more in flight than each node's -j and the fleet's per-host cap"
    )
    func threeDaemons() async throws {
        // Leases long enough that a loaded machine's late heartbeat never hands a task over
        // (which would fetch it twice); the kill -9 test below keeps them short.
        try await Self.withFleet(files: 300, size: 32 << 10, rate: "128k", limit: 2, perHost: 2, leaseSeconds: 10) {
            fleet in
            // Each node may run 2 per host; the fleet caps a host at 4 over all three.
            let settings = try await fleet.clients[2].update(API.Settings(fleet: API.FleetCaps(maxDownloadsPerHost: 4)))
            #expect(settings.node == "n2" && settings.fleet == API.FleetCaps(maxDownloadsPerHost: 4))
            // Half by the address, half by the name: two hosts to the per-host cap, one server.
            let requests = (0..<300).map { index in
                let host = index % 2 == 0 ? "127.0.0.1" : "localhost"
                return DownloadRequest(
                    url: URL(string: "http://\(host):\(fleet.nginx.port)/slow/f\(index)")!,
                    destination: .directory(fleet.out),
                    session: "fleet"
                )
            }
            _ = try await fleet.clients[0].add(requests)
            // Each running task names the daemon running it; every daemon sees the fleet.
            #expect(
                try await waitUntil {
                    try await fleet.clients[1].tasks().contains { $0.state == .running && $0.node != nil }
                }
            )
            let status = try await fleet.clients[1].status()
            #expect(status.fleet?.node == "n1" && status.fleet?.nodes.map(\.name) == ["n0", "n1", "n2"])
            #expect(status.fleet?.nodes.map(\.maxConcurrentDownloads) == [2, 2, 2])
            #expect(status.fleet?.caps == API.FleetCaps(maxDownloadsPerHost: 4))
            // haul status: the fleet's counts, this node's own limit, each node's row.
            let shown = try await HaulProcess.run(["status"], home: fleet.home(1))
            #expect(shown.status == 0, "\(shown.stderr)")
            let running = shown.stdout.split(separator: "\n").first { $0.hasPrefix("running:") } ?? ""
            #expect(running.contains(" in the fleet, ") && running.contains(" here of at most 2; "), "\(shown.stdout)")
            #expect(shown.stdout.contains("caps:     4 per host"), "\(shown.stdout)")
            for node in ["n0", "n1 (this)", "n2"] {
                #expect(
                    shown.stdout.split(separator: "\n").contains {
                        $0.hasPrefix("  \(node) ") && $0.contains(" running ")
                    },
                    "\(shown.stdout)"
                )
            }
            #expect(status.store.hasPrefix("postgres://haul@127.0.0.1:") && status.fleet?.leaseSeconds == 10)
            // No node ever runs more than its own -j (sampled at every look).
            var most: [String: Int] = [:]
            #expect(
                try await waitUntil(timeout: .seconds(300)) {
                    let tasks = try await fleet.clients[1].tasks()
                    let running = tasks.filter { $0.state == .running }.compactMap(\.node).map { ($0, 1) }
                    most.merge(Dictionary(running, uniquingKeysWith: +), uniquingKeysWith: max)
                    return tasks.count == 300 && tasks.allSatisfy { $0.state == .completed }
                }
            )
            for index in 0..<300 {
                #expect(Self.sha256("\(fleet.out)/f\(index)") == Self.sha256("\(fleet.nginx.root)/f\(index)"))
            }
            #expect(try await fleet.clients[0].tasks().allSatisfy { $0.node == nil }, "a finished task is no node's")
            let log = fleet.nginx.accessLog().filter { $0.first?.hasPrefix("/slow/") == true }
            let fetches = Dictionary(grouping: log, by: { $0[0] })
            #expect(fetches.count == 300)
            #expect(fetches.values.allSatisfy { $0.count == 1 && $0[0][1] == "200" }, "a file was fetched twice")
            let inFlight = Self.mostInFlight(log)
            #expect(most.values.allSatisfy { $0 <= 2 }, "\(most)")
            #expect(inFlight.overall <= 6, "\(inFlight)")
            #expect(inFlight.perHost.count == 2 && inFlight.perHost.values.allSatisfy { $0 <= 4 }, "\(inFlight)")
            // Each completion is in the session's log once, whichever daemon logged it.
            // (A daemon appends to the log just after recording the state: wait for the last.)
            var completions: [EventRecord] = []
            #expect(
                try await waitUntil {
                    completions = try await fleet.clients[2].loggedEvents(session: "fleet").filter {
                        $0.kind == .completed
                    }
                    return completions.count >= 300
                }
            )
            #expect(
                completions.count == 300 && Set(completions.compactMap(\.taskID)).count == 300,
                "\(completions.count)"
            )
        }
    }

    @Test(
        "what one daemon does reaches the others at once: a node's limits changed through another apply on it, the fleet's caps on every node, and its events reach their event streams"
    )
    func signalsReachEveryNode() async throws {
        try await Self.withFleet(files: 1, size: 8 << 20, rate: "256k", limit: 4, perHost: 4) { fleet in
            // n1's own limits changed through n0 run on n1 (its own values, not the store's);
            // n2 keeps its own.
            let changed = try await fleet.clients[0].update(
                API.Settings(maxConcurrentDownloads: 2, maxDownloadsPerHost: 3),
                node: "n1"
            )
            #expect(changed.node == "n1" && changed.maxConcurrentDownloads == 2 && changed.maxDownloadsPerHost == 3)
            #expect(
                try await waitUntil {
                    let settings = try await fleet.clients[1].settings()
                    return settings.maxConcurrentDownloads == 2 && settings.maxDownloadsPerHost == 3
                }
            )
            #expect(try await fleet.clients[2].settings().maxConcurrentDownloads == 4)
            #expect(try await fleet.clients[2].settings(node: "n1").maxConcurrentDownloads == 2)
            // A setting of the whole fleet's is not a node's; an unknown node is named.
            await #expect(throws: HaulError.self) {
                try await fleet.clients[0].update(API.Settings(giveUpAfter: 600), node: "n1")
            }
            do {
                try await fleet.clients[0].update(API.Settings(maxConcurrentDownloads: 2), node: "n9")
                Issue.record("an unknown node was accepted")
            } catch let error as HaulError {
                #expect(error.message == "No node 'n9' in this fleet. Its nodes: n0, n1, n2 (haul status lists them)")
            }
            _ = try await fleet.clients[0].update(API.Settings(fleet: API.FleetCaps(maxConcurrentDownloads: 5)))
            #expect(try await fleet.clients[2].settings().fleet == API.FleetCaps(maxConcurrentDownloads: 5))

            // n2's stream of the session hears n0's pause, which n0 logs: a daemon's stream used
            // to show other daemons' events only once its own daemon logged something.
            let heard = Mutex<[EventRecord]>([])
            let listener = Task {
                for try await record in fleet.clients[2].attach(session: "live") {
                    heard.withLock { $0.append(record) }
                }
            }
            defer { listener.cancel() }
            let added = try await fleet.clients[0].add([
                DownloadRequest(url: fleet.nginx.url("/slow/f0"), destination: .directory(fleet.out), session: "live")
            ])
            let id = try #require(added.first?.id)
            #expect(
                try await waitUntil {
                    let task = try await fleet.clients[0].info(id)
                    return task.state == .running && task.bytesCommitted > 0
                }
            )
            _ = try await fleet.clients[0].pause(API.Selector(ids: [id]))
            #expect(
                try await waitUntil {
                    heard.withLock { $0.contains { $0.taskID == id && $0.kind == .state && $0.to == .paused } }
                },
                "\(heard.withLock { $0.map { "\($0.kind) \($0.to.map(\.rawValue) ?? "")" } })"
            )
        }
    }

    @Test(
        "SIGSTOP past its lease: another daemon takes the download over; the stopped one, continued, writes nothing and gives it up"
    )
    func stoppedPastItsLease() async throws {
        try await Self.withFleet(files: 1, size: 6 << 20, rate: "512k", limit: 2, perHost: 2, initially: 1) { fleet in
            let added = try await fleet.clients[0].add([
                DownloadRequest(url: fleet.nginx.url("/slow/f0"), destination: .directory(fleet.out), session: "fleet")
            ])
            let id = try #require(added.first?.id)
            let location = try PostgresLocation(parsing: fleet.store)
            guard let server = PostgresServer.current else { return }
            try await server.withClient(database: location.database) { db in
                func lease() async throws -> (owner: String?, fence: Int64, committed: Int64) {
                    let rows = try await db.query(
                        """
                        SELECT t.owner, t.fence, COALESCE((SELECT SUM(s.committed - s.start) FROM haul_segment s
                            WHERE s."taskID" = t.id), 0)::bigint
                        FROM haul_task t WHERE t.id = \(id)
                        """
                    ).decode((String?, Int64, Int64).self).collected()
                    return try #require(rows.first)
                }
                #expect(
                    try await waitUntil {
                        let now = try await lease()
                        return now.owner == "n0" && now.committed > 0
                    }
                )
                let n0 = try #require(fleet.daemon(0))
                n0.kill(SIGSTOP)
                // n1 takes it over once n0's lease (3 s) runs out, with a later fence, and
                // goes on from n0's checkpoint. (On a loaded machine n1 may itself miss a
                // renewal in time and take the task again: a later fence still. Its first
                // runs may find the part file still locked by the stopped n0 and wait to try
                // again, holding no lease meanwhile: n1 holds it only now and then.)
                try await fleet.start(1)
                var last = try await lease()
                #expect(
                    try await waitUntil(timeout: .seconds(60)) {
                        last = try await lease()
                        return last.owner != "n0" && last.fence >= 2
                    },
                    "\(last) n1: \(fleet.daemon(1)?.currentStderr.suffix(2000) ?? "")"
                )
                let atTakeover = try await lease().committed
                n0.kill(SIGCONT)
                // n0 wakes with its transfer and older checkpoint: every write it tries is
                // refused, so the checkpoint never goes back; it says so and stops.
                var seen = [try await lease()]
                let refused = try await waitUntil(timeout: .seconds(60)) {
                    seen.append(try await lease())
                    return n0.currentStderr.contains("stopped a download whose claim in the shared queue was revoked")
                }
                #expect(refused, "\(n0.currentStderr.suffix(2000))")
                let committed = seen.map(\.committed)
                #expect(committed == committed.sorted() && committed[0] >= atTakeover, "went back: \(committed)")
                #expect(seen.allSatisfy { $0.fence >= 2 && $0.owner != "n0" }, "\(seen)")
                let done = try await waitUntil(timeout: .seconds(120)) {
                    try await fleet.clients[1].info(id).state == .completed
                }
                let info = try await fleet.clients[1].info(id)
                #expect(
                    done,
                    "\(info.state) \(info.errorMessage ?? "") n1: \(fleet.daemon(1)?.currentStderr.suffix(3000) ?? "")"
                )
                #expect(Self.sha256("\(fleet.out)/f0") == Self.sha256("\(fleet.nginx.root)/f0"))
                // n0 runs on. (n1's first try may have found the part file still held by the
                // stalled n0: it tries again once n0 let go, so the task may be leased again.)
                #expect(try await fleet.clients[0].status().fleet?.node == "n0")
                let completions = try await fleet.clients[0].loggedEvents(session: "fleet").filter {
                    $0.kind == .completed
                }
                #expect(completions.count == 1)
            }
        }
    }
}
