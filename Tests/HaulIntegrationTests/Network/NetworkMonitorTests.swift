import Foundation
import HaulTestSupport
import HaulTesting
import Synchronization
import Testing

@testable import Haul

/// The rtnetlink monitor on its own, against a veth pair the test creates (addresses on that
/// pair only, removed at the end). Root only; in CI a missing privilege fails.
@Suite("Network monitor", .serialized, .tags(.process), .timeLimit(.minutes(10)))
struct NetworkMonitorTests {
    /// Counts the changes a monitor reports, reading its stream on a task of its own.
    final class Changes: Sendable {
        final class Count: Sendable {
            let value = Mutex(0)
        }

        private let count = Count()
        private let reader: Task<Void, Never>

        init(_ stream: AsyncStream<Void>) {
            let count = self.count
            reader = Task {
                for await _ in stream { count.value.withLock { $0 += 1 } }
            }
        }

        var seen: Int { count.value.withLock { $0 } }

        /// Waits for a change after the `after`th, at most `timeout`.
        func next(after: Int, timeout: Duration = .seconds(10)) async throws -> Bool {
            try await waitUntil(timeout: timeout) { self.seen > after }
        }

        /// Waits until `condition` holds, looking again at each change (and at least every second).
        func until(_ condition: () -> Bool) async throws -> Bool {
            let deadline = ContinuousClock.now + .seconds(20)
            while ContinuousClock.now < deadline {
                if condition() { return true }
                _ = try await next(after: seen, timeout: .seconds(1))
            }
            return condition()
        }

        deinit { reader.cancel() }
    }

    @Test(
        "links, carriers and routes: a change arrives for each, and the route says which interface and whether it carries",
        .enabled(if: VethPair.usable)
    )
    func routesFollowTheLinks() async throws {
        let monitor = try NetworkMonitor()
        defer { monitor.stop() }
        let changes = Changes(monitor.changes())
        let pair = try await VethPair.create()
        do {
            #expect(try await changes.next(after: 0), "creating the pair is a change")
            let peer = pair.insideAddress
            #expect(
                try await changes.until { NetworkMonitor.route(to: peer)?.interface == pair.outside },
                "\(String(describing: NetworkMonitor.route(to: peer)))"
            )
            // The kernel may still be bringing the carrier up.
            #expect(try await changes.until { NetworkMonitor.route(to: peer)?.isUsable == true })
            #expect(NetworkMonitor.route(to: peer)?.sourceAddress == pair.outsideAddress)

            // The far end goes down: the route stays, the carrier goes.
            var before = changes.seen
            try await pair.set(inside: true, up: false)
            #expect(try await changes.next(after: before), "losing the carrier is a change")
            #expect(
                try await changes.until {
                    let route = NetworkMonitor.route(to: peer)
                    return route?.interface == pair.outside && route?.isUsable == false
                }
            )

            // Back up: usable again.
            try await pair.set(inside: true, up: true)
            #expect(try await changes.until { NetworkMonitor.route(to: peer)?.isUsable == true })

            // This end down: its route goes; whatever route is left is not through it.
            before = changes.seen
            try await pair.set(up: false)
            #expect(try await changes.next(after: before), "a link going down is a change")
            #expect(try await changes.until { NetworkMonitor.route(to: peer)?.interface != pair.outside })
        } catch {
            await pair.remove()
            throw error
        }
        await pair.remove()
        #expect(NetworkMonitor.route(to: pair.insideAddress)?.interface != pair.outside)
    }

    @Test("stop ends every change stream")
    func stopEnds() async throws {
        let monitor = try NetworkMonitor()
        var changes = monitor.changes().makeAsyncIterator()
        monitor.stop()
        let ended = await changes.next() == nil
        #expect(ended)
        var late = monitor.changes().makeAsyncIterator()
        let lateEnded = await late.next() == nil
        #expect(lateEnded)
    }

    @Test("the route to a name is the default route; to loopback, lo")
    func defaultAndLoopback() {
        #expect(NetworkMonitor.route(to: "127.0.0.1")?.interface == "lo")
        #expect(NetworkMonitor.route(to: "127.0.0.1")?.isUsable == true)
        #expect(NetworkMonitor.route(to: "[::1]")?.interface == "lo")
        // This machine has a default route (CI's too): a name goes where it goes.
        let named = NetworkMonitor.route(to: "files.example.test")
        #expect(named == nil || named?.interface != "lo")
    }
}

/// What a manager that watches the network tells its consumers: each change of the network
/// as it sees it, once, and the reason of every state change.
@Suite("Network events", .timeLimit(.minutes(10)))
struct NetworkEventTests {
    @Test("the policy turned off and on is told once each (networkChanged); the same policy again tells nothing")
    func policyChanges() async throws {
        let temp = try TemporaryDirectory()
        var configuration = ManagerFixtures.configuration(.sqlite(at: temp.file("s.sqlite")), limit: 1)
        configuration.watchesNetwork = true
        try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
            let events = manager.events()
            let before = try #require(await manager.networkStatus)
            #expect(before.allowsMetered)
            try await manager.setNetworkPolicy(NetworkPolicy(allowsMetered: false))
            try await manager.setNetworkPolicy(NetworkPolicy(allowsMetered: false))
            var expected = [false, true]
            var policy = NetworkPolicy(allowsMetered: true)
            try await manager.setNetworkPolicy(policy)
            if let interface = before.defaultRoute?.interface {
                // The default route's interface named metered: told, with isMetered.
                policy.meteredInterfaces = [interface]
                try await manager.setNetworkPolicy(policy)
                expected.append(true)
            }
            var told: [NetworkStatus] = []
            var iterator = events.makeAsyncIterator()
            while told.count < expected.count, let event = await iterator.next() {
                if case .networkChanged(let status) = event { told.append(status) }
            }
            #expect(told.map(\.allowsMetered) == expected)
            #expect(told.dropLast().allSatisfy { $0.isMetered == false && $0.defaultRoute == before.defaultRoute })
            if before.defaultRoute != nil { #expect(told.last?.isMetered == true) }
            #expect(await manager.networkStatus == told.last)
        }
    }

    @Test("each state change says why: started, paused, resumed, completed")
    func reasons() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            // Held at 512 KiB until it is paused: running when the pause comes, however slow the machine.
            server.set("/r", .init(size: 1 << 20, seed: 3, holdAt: 512 << 10))
            let configuration = ManagerFixtures.configuration(.sqlite(at: temp.file("s.sqlite")), limit: 1)
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                let events = manager.events()
                let id = try await manager.download(
                    DownloadRequest(url: server.url("/r"), destination: .directory(temp.path))
                ).id
                #expect(try await waitUntil { try await manager.info(id).state == .running })
                _ = try await manager.pause(id)
                server.release("/r")
                _ = try await manager.resume(id)
                var moves: [String] = []
                for await event in events {
                    guard case .stateChanged(_, _, let to, let reason) = event else { continue }
                    moves.append("\(to.rawValue) \(reason.rawValue)")
                    if to == .completed { break }
                }
                #expect(
                    moves == [
                        "running started", "paused paused", "queued resumed", "running started", "completed completed",
                    ]
                )
            }
        }
    }
}
