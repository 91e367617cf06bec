import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// A manager waiting for the network, on a clock the test moves: however long the wait, a
/// task spends nothing — no request, no retry, no failure — and goes when the network lets
/// it. nginx serves from a network namespace the test creates, across a veth pair whose
/// inner end the test takes down; root only, and in CI a missing privilege fails.
///
/// Time here is the test clock's: an hour passes in a step, and the only way the clock
/// could wake the task (a retry armed, a deadline) is what the tests show does not exist.
@Suite("Waiting for the network on a test clock", .serialized, .tags(.nginx), .timeLimit(.minutes(5)))
struct NetworkWaitClockTests {
    static let usable = NetworkOutageTests.usable

    /// A manager on `clock` that watches the network and keeps trying, as the daemon does.
    static func configuration(_ temp: TemporaryDirectory, _ clock: TestClock) -> DownloadManager.Configuration {
        var downloader = testConfiguration(store: temp.file("s.sqlite"), retries: 0)
        downloader.clock = clock
        var configuration = DownloadManager.Configuration(downloader: downloader, maxConcurrentDownloads: 2)
        configuration.keepsTrying = KeepTrying(giveUpAfter: .seconds(600), firstDelay: .seconds(30))
        configuration.watchesNetwork = true
        return configuration
    }

    /// The states `id` went through, from `events`, until it completed.
    static func states(of id: UUID, in events: DownloadEvents) async -> [TaskState] {
        var states: [TaskState] = []
        for await event in events {
            guard case .stateChanged(let changed, _, let to, _) = event, changed == id else { continue }
            states.append(to)
            if to == .completed || to == .failed { break }
        }
        return states
    }

    /// Once task `id` waits for the network: nothing is armed on the clock to wake it (no
    /// retry, no deadline), and an hour of it — six times the give-up time, a hundred retry
    /// delays — leaves it waiting, with nothing asked of the server.
    static func waitAnHour(
        _ manager: DownloadManager,
        _ id: UUID,
        _ clock: TestClock,
        _ server: ExternalServer
    )
        async throws
    {
        #expect(try await waitUntil { try await manager.info(id).state == .waitingForNetwork })
        #expect(clock.sleepers == 0, "something is armed to wake a task that waits for the network")
        for _ in 0..<60 {
            clock.advance(by: .seconds(60))
            await Task.yield()
        }
        #expect(try await manager.info(id).state == .waitingForNetwork)
        #expect(server.accessLog().isEmpty, "\(server.accessLog())")
    }

    @Test(
        "link down: the task waits for the network through an hour on the clock, past every retry delay and the give-up time, asking nothing; link up: it completes",
        .enabled(if: usable)
    )
    func outageOnTheClock() async throws {
        let bytes = TestContent.bytes(count: 2 << 20, seed: 45)
        try await VethPair.withServer(slowRate: "1m", serving: bytes) { pair, server in
            let temp = try TemporaryDirectory()
            let clock = TestClock()
            try await pair.set(inside: true, up: false)
            try await DownloadManager.withDownloadManager(configuration: Self.configuration(temp, clock)) { manager in
                let events = manager.events()
                let task = try await manager.download(
                    DownloadRequest(url: server.url("/big.bin"), destination: .directory(temp.path))
                )
                try await Self.waitAnHour(manager, task.id, clock, server)
                try await pair.set(inside: true, up: true)
                let states = await Self.states(of: task.id, in: events)
                #expect(states.first == .running && states.last == .completed, "\(states)")
                #expect(states.contains(.waitingForNetwork))
                #expect(!states.contains(.retrying) && !states.contains(.failed), "\(states)")
            }
            #expect(sha256(file: temp.file("big.bin")) == TestContent.sha256(bytes))
            #expect(server.accessLog().count == 1, "\(server.accessLog())")
        }
    }

    @Test(
        "metered networks not allowed: the task waits an hour on the clock without a byte asked for; allowed, it completes",
        .enabled(if: usable)
    )
    func meteredOnTheClock() async throws {
        let bytes = TestContent.bytes(count: 2 << 20, seed: 46)
        try await VethPair.withServer(slowRate: "1m", serving: bytes) { pair, server in
            let temp = try TemporaryDirectory()
            let clock = TestClock()
            var configuration = Self.configuration(temp, clock)
            configuration.networkPolicy = NetworkPolicy(allowsMetered: false, meteredInterfaces: [pair.outside])
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                let events = manager.events()
                let task = try await manager.download(
                    DownloadRequest(url: server.url("/big.bin"), destination: .directory(temp.path))
                )
                try await Self.waitAnHour(manager, task.id, clock, server)
                #expect(try await manager.info(task.id).errorMessage?.contains("metered") == true)
                try await manager.setNetworkPolicy(
                    NetworkPolicy(allowsMetered: true, meteredInterfaces: [pair.outside])
                )
                let states = await Self.states(of: task.id, in: events)
                #expect(states.last == .completed && !states.contains(.retrying), "\(states)")
            }
            #expect(sha256(file: temp.file("big.bin")) == TestContent.sha256(bytes))
        }
    }
}
