import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Synchronization
import Testing

@testable import Haul
@testable import HaulCLI

/// A daemon download across a link outage, in a network namespace the test creates: nginx
/// runs inside it on a veth pair's inner address, the daemon outside; the inner end going
/// down takes the outer end's carrier. Root only; in CI a missing privilege fails.
@Suite("Network outages", .serialized, .tags(.process, .nginx, .slow), .leftOutOfFastLoop, .timeLimit(.minutes(20)))
struct NetworkOutageTests {
    static let usable = (VethPair.isPossible && ExternalServer.nginx != nil) || ExternalServer.isCI

    @Test(
        "link down mid-download: waitingForNetwork at once, no retry spent; link up: a ranged resume, the right hash",
        .enabled(if: usable)
    )
    func outage() async throws {
        let bytes = TestContent.bytes(count: 12 << 20, seed: 41)
        try await VethPair.withServer(slowRate: "1m", serving: bytes) { pair, server in
            try await Self.withDaemon { home, client in
                try await download(bytes, from: server, pair: pair, home: home, client: client)
            }
        }
    }

    /// Runs `body` with a daemon on a new home (checkpointing every 0.2 s; in `namespace`
    /// when given) and a client of it; stops the daemon afterwards, whether `body` throws or not.
    static func withDaemon(
        namespace: String? = nil,
        environment: [String: String?] = [:],
        arguments: [String] = [],
        _ body: (String, HaulClient) async throws -> Void
    ) async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let launcher = try namespace.map { [try #require(VethPair.ip), "netns", "exec", $0] } ?? []
        let started = try await HaulProcess(
            ["daemon", "--checkpoint-interval", "0.2"] + arguments,
            home: home,
            launcher: launcher,
            environment: environment
        ).finish()
        #expect(started.status == 0, "\(started.stderr)")
        let client = HaulClient(home: HaulHome(path: home))
        do {
            try await body(home, client)
        } catch {
            _ = try? await HaulProcess.run(["daemon", "stop"], home: home)
            try? await client.shutdown()
            throw error
        }
        _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        try await client.shutdown()
    }

    private func download(
        _ bytes: [UInt8],
        from server: ExternalServer,
        pair: VethPair,
        home: String,
        client: HaulClient
    ) async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let added = try await HaulProcess.run(
            ["add", "--session", "s", "-x", "1", "-d", out, server.url("/slow/big.bin").absoluteString],
            home: home
        )
        #expect(added.status == 0, "\(added.stderr)")
        #expect(try await waitUntil { (try await client.tasks().first?.bytesCommitted ?? 0) > 2 << 20 })

        // The far end goes down: the carrier goes, and the task waits for the network.
        try await pair.set(inside: true, up: false)
        let down = ContinuousClock.now
        #expect(
            try await waitUntil(timeout: .seconds(30)) { try await client.tasks().first?.state == .waitingForNetwork }
        )
        let noticed = ContinuousClock.now - down
        let committed = try #require(try await client.tasks().first?.bytesCommitted)
        let listed = try await HaulProcess.run(["list"], home: home)
        #expect(listed.stdout.contains("offline"), "\(listed.stdout)")

        // However long the outage, the wait spends nothing: an hour of it on a test clock is
        // NetworkWaitClockTests'. Here: the daemon's wait, and its resume.
        #expect(try await client.tasks().first?.state == .waitingForNetwork)

        // The link comes back: the task queues and resumes from its checkpoint.
        try await pair.set(inside: true, up: true)
        let waited = try await HaulProcess.run(["wait", "--session", "s"], home: home)
        #expect(waited.status == 0, "\(waited.stderr)")
        #expect(sha256(file: out + "/big.bin") == TestContent.sha256(bytes))
        let states = try await client.loggedEvents(session: "s").filter { $0.kind == .state }.compactMap(\.to)
        #expect(!states.contains(.failed) && !states.contains(.retrying), "\(states)")
        #expect(states.contains(.waitingForNetwork), "\(states)")
        #expect(states.last == .completed)
        let log = server.accessLog()
        let last = try #require(log.last)
        #expect(last[1] == "206", "\(log)")
        #expect(last[2] == resumeRange(from: committed), "\(log)")
        // What it measured, for the record.
        print("waitingForNetwork \(noticed) after the link went down; resumed at \(committed) bytes")
    }

    @Test(
        "haul get: link down mid-download waits, saying so, and resumes when it is back; --wait-for-network bounds the wait",
        .enabled(if: usable)
    )
    func getWaits() async throws {
        let bytes = TestContent.bytes(count: 8 << 20, seed: 42)
        try await VethPair.withServer(slowRate: "1m", serving: bytes) { pair, server in
            try await getAcrossOutage(bytes, server, pair)
        }
    }

    private func getAcrossOutage(_ bytes: [UInt8], _ server: ExternalServer, _ pair: VethPair) async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let get = try HaulProcess(
            [
                "get", "-x", "1", "--checkpoint-interval", "0.2", "-o", "big.bin",
                server.url("/slow/big.bin").absoluteString,
            ],
            home: home,
            directory: temp.path
        )
        let store = try Store(path: home + "/haul.sqlite")
        #expect(try await waitUntil { (try await store.infos().first?.bytesCommitted ?? 0) > 1 << 20 })
        try await pair.set(inside: true, up: false)
        #expect(try await waitUntil { get.currentStderr.contains("waiting for the network…") }, "\(get.currentStderr)")
        try await pair.set(inside: true, up: true)
        let result = await get.finish()
        #expect(result.status == 0, "\(result.stderr)")
        #expect(result.stderr.contains("the network is back; resuming"), "\(result.stderr)")
        // Nothing spent while the network was away. (Just after it is back the kernel may
        // still answer "no route to host" until it has found the neighbour again: that first
        // connection is an ordinary retry.)
        let duringOutage = result.stderr.components(separatedBy: "the network is back").first ?? ""
        #expect(!duringOutage.contains("retrying"), "\(result.stderr)")
        #expect(sha256(file: temp.file("big.bin")) == TestContent.sha256(bytes))
        #expect(server.accessLog().last?[1] == "206")

        // Down for longer than --wait-for-network: it fails, saying why.
        try await pair.set(inside: true, up: false)
        let started = ContinuousClock.now
        let bounded = try await HaulProcess.run(
            ["get", "--wait-for-network", "2s", "-o", "again.bin", server.url("/big.bin").absoluteString],
            home: home,
            directory: temp.path
        )
        #expect(bounded.status == 4, "\(bounded.stderr)")
        #expect(ContinuousClock.now - started >= .seconds(2))
        #expect(bounded.stderr.contains("No usable route to \(pair.insideAddress) for 2 s"), "\(bounded.stderr)")
        try await pair.set(inside: true, up: true)
    }

    @Test(
        "network events: the default route losing its carrier is logged and streamed before the task waits (noRoute); its return before the task queues (networkAvailable)",
        .enabled(if: usable)
    )
    func networkEvents() async throws {
        let bytes = TestContent.bytes(count: 8 << 20, seed: 47)
        try await VethPair.withServer(slowRate: "1m", serving: bytes, serverOutside: true) { pair, server in
            try await Self.withDaemon(namespace: pair.namespace) { home, client in
                try await eventsAcrossOutage(bytes, server, pair, home: home, client: client)
            }
        }
    }

    private func eventsAcrossOutage(
        _ bytes: [UInt8],
        _ server: ExternalServer,
        _ pair: VethPair,
        home: String,
        client: HaulClient
    ) async throws {
        // The daemon runs inside the namespace: its default route is the pair's inner end.
        let status = try await client.status()
        #expect(
            status.network?.interface == pair.inside && status.network?.usable == true,
            "\(String(describing: status.network))"
        )
        let live = Mutex<[EventRecord]>([])
        let listener = Task {
            for try await record in client.liveEvents(session: "e") { live.withLock { $0.append(record) } }
        }
        defer { listener.cancel() }
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let added = try await HaulProcess.run(
            ["add", "--session", "e", "-x", "1", "-d", out, server.url("/slow/big.bin").absoluteString],
            home: home
        )
        #expect(added.status == 0, "\(added.stderr)")
        #expect(try await waitUntil { (try await client.tasks().first?.bytesCommitted ?? 0) > 1 << 20 })

        // The outer end goes down: the inner one loses its carrier.
        try await pair.set(up: false)
        #expect(
            try await waitUntil(timeout: .seconds(30)) { try await client.tasks().first?.state == .waitingForNetwork }
        )
        let down = try await client.status()
        #expect(down.network?.usable == false && down.network?.waitingTasks == 1)
        try await pair.set(up: true)
        let waited = try await HaulProcess.run(["wait", "--session", "e"], home: home)
        #expect(waited.status == 0, "\(waited.stderr)")
        #expect(sha256(file: out + "/big.bin") == TestContent.sha256(bytes))

        // The log, in order: the network down, the task waiting for it; the network back, the task queued.
        let logged = try await client.loggedEvents(session: "e")
        let story = logged.compactMap { record -> String? in
            switch record.kind {
            case .network: return "network \(record.interface ?? "none") connected=\(record.connected ?? false)"
            case .state where record.to == .waitingForNetwork || record.from == .waitingForNetwork:
                return "\(record.to?.rawValue ?? "?") \(record.reason?.rawValue ?? "?")"
            default: return nil
            }
        }
        #expect(
            story == [
                "network \(pair.inside) connected=false", "waitingForNetwork noRoute",
                "network \(pair.inside) connected=true", "queued networkAvailable",
            ],
            "\(story)"
        )
        let network = try #require(logged.first { $0.kind == .network })
        #expect(network.taskID == nil && network.address == pair.insideAddress && network.allowMetered == true)
        #expect(logged.last?.kind == .completed)
        // The same events reached the live stream (Server-Sent Events).
        #expect(try await waitUntil { live.withLock { $0.contains { $0.kind == .completed } } })
        let streamed = live.withLock { $0.filter { $0.kind == .network || $0.kind == .state } }
        #expect(streamed.filter { $0.kind == .network }.map(\.connected) == [false, true], "\(streamed)")
        let line = EventText.line(network)
        #expect(line.contains("network: default route via \(pair.inside) (\(pair.insideAddress)), down"), "\(line)")
    }

    @Test(
        "haul daemon --wait-for-network 2s: a task whose link stays down fails after 2 s, saying how to resume it",
        .enabled(if: usable)
    )
    func daemonWaitLimit() async throws {
        let bytes = TestContent.bytes(count: 1 << 20, seed: 59)
        try await VethPair.withServer(slowRate: "1m", serving: bytes, serverOutside: true) { pair, server in
            try await pair.set(up: false)
            try await Self.withDaemon(namespace: pair.namespace, arguments: ["--wait-for-network", "2s"]) {
                home,
                client in
                let temp = try TemporaryDirectory()
                let started = ContinuousClock.now
                let added = try await HaulProcess.run(
                    ["add", "--session", "w", "-d", try temp.directory("out"), server.url("/big.bin").absoluteString],
                    home: home
                )
                #expect(added.status == 0, "\(added.stderr)")
                let waited = try await HaulProcess.run(["wait", "--session", "w"], home: home)
                #expect(waited.status == 4, "\(waited.stderr)")
                #expect(ContinuousClock.now - started >= .seconds(2))
                let task = try #require(try await client.tasks().first)
                #expect(task.state == .failed)
                let message = task.errorMessage ?? ""
                #expect(message.contains("for 2 s: the network did not come back"), "\(message)")
                #expect(message.contains("haul resume \(task.id.uuidString.prefix(8).lowercased())"), "\(message)")
                let reasons = try await client.loggedEvents(session: "w").compactMap(\.reason)
                #expect(reasons.suffix(2) == [.noRoute, .networkWaitExpired], "\(reasons)")
            }
        }
    }

    @Test(
        "metered by NetworkManager: its Metered on the route's interface with the policy off holds the task (metered); turned off, the task completes",
        .enabled(if: usable && SystemBus.usable)
    )
    func meteredByNetworkManager() async throws {
        let bytes = TestContent.bytes(count: 4 << 20, seed: 53)
        try await SystemBus.with { system in
            try await VethPair.withServer(slowRate: "2m", serving: bytes, serverOutside: true) { pair, server in
                try await system.device(pair.inside, metered: 1)
                try await Self.withDaemon(
                    namespace: pair.namespace,
                    environment: ["DBUS_SYSTEM_BUS_ADDRESS": system.address]
                ) { home, client in
                    try await meteredBySystem(bytes, server, pair, system, home: home, client: client)
                }
            }
        }
    }

    private func meteredBySystem(
        _ bytes: [UInt8],
        _ server: ExternalServer,
        _ pair: VethPair,
        _ system: SystemBus,
        home: String,
        client: HaulClient
    ) async throws {
        #expect(try await waitUntil { try await client.status().network?.meteredBySystem == [pair.inside] })
        let status = try await client.status()
        #expect(status.network?.metered == true && status.network?.interface == pair.inside)
        let set = try await HaulProcess.run(["set", "--allow-metered", "no"], home: home)
        #expect(set.status == 0, "\(set.stderr)")
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let added = try await HaulProcess.run(
            ["add", "--session", "n", "-d", out, server.url("/slow/big.bin").absoluteString],
            home: home
        )
        #expect(added.status == 0, "\(added.stderr)")
        #expect(try await waitUntil { try await client.tasks().first?.state == .waitingForNetwork })
        let waiting = try #require(try await client.tasks().first)
        #expect(waiting.errorMessage?.contains("\(pair.inside), which is metered") == true, "\(waiting)")
        let shown = try await HaulProcess.run(["status"], home: home)
        #expect(shown.stdout.contains("NetworkManager says \(pair.inside)"), "\(shown.stdout)")
        #expect(shown.stdout.contains("default route via \(pair.inside) (\(pair.insideAddress)), metered"))

        // NetworkManager changes its mind: the task runs to the end.
        try await system.device(pair.inside, metered: 2)
        let waited = try await HaulProcess.run(["wait", "--session", "n"], home: home)
        #expect(waited.status == 0, "\(waited.stderr)")
        #expect(sha256(file: out + "/big.bin") == TestContent.sha256(bytes))
        let logged = try await client.loggedEvents(session: "n")
        #expect(logged.filter { $0.to == .waitingForNetwork }.map(\.reason) == [.metered])
        #expect(logged.filter { $0.from == .waitingForNetwork }.map(\.reason) == [.networkAvailable])
        #expect(logged.filter { $0.kind == .network }.last?.metered == false, "\(logged)")
    }
}
