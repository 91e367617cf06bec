import Foundation
import HaulTestSupport
import HaulTesting
import Synchronization
import Testing

@testable import Haul

/// Timing on a clock the test moves: rates, retry delays and the speed floor are checked in
/// the clock's time, so a loaded machine changes nothing and no test waits real seconds.
@Suite("Time on a test clock", .timeLimit(.minutes(5)))
struct ClockTests {
    /// Whether a task has ended.
    final class Flag: Sendable {
        private let value = Atomic(false)
        func set() { value.store(true, ordering: .sequentiallyConsistent) }
        var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
    }

    @Test("a rate limit makes a taker wait exactly the time its bytes take at that rate, not a slice less")
    func limiterWaitsItsTime() async throws {
        let clock = TestClock()
        let limiter = RateLimiter(bytesPerSecond: 1000, clock: clock)
        let done = Flag()
        let take = Task {
            try await limiter.take(1000)
            done.set()
        }
        // A second's worth at 1000 B/s: asleep through nine tenths, back at the tenth.
        for _ in 0..<10 {
            await clock.waitForSleepers(1)
            #expect(!done.isSet, "back at \(clock.now) of 1 s")
            clock.advance(by: .milliseconds(100))
        }
        try await take.value
        #expect(done.isSet)
        #expect(clock.now.offset == .seconds(1))
    }

    @Test("lifting the limit wakes a taker at its next slice, not after its whole debt")
    func liftedLimitWakes() async throws {
        let clock = TestClock()
        let limiter = RateLimiter(bytesPerSecond: 1000, clock: clock)
        let take = Task { try await limiter.take(10_000) }  // Ten seconds at the old rate.
        await clock.waitForSleepers(1)
        limiter.setRate(nil)
        clock.advance(by: .milliseconds(100))
        try await take.value
        #expect(clock.now.offset == .milliseconds(100))
    }

    @Test("a download limited to 64 KiB/s takes four seconds of the clock for 256 KiB, and arrives whole")
    func limitedDownloadOnTheClock() async throws {
        let temp = try TemporaryDirectory()
        let clock = TestClock()
        try await TestServer.withServer { server in
            server.set("/f", .init(size: 256 << 10, seed: 7))
            var configuration = testConfiguration(store: temp.file("s.sqlite"))
            configuration.clock = clock
            try await Downloader.withDownloader(configuration: configuration) { downloader in
                var request = DownloadRequest(url: server.url("/f"), destination: .directory(temp.path))
                request.rateLimit = 64 << 10
                let task = try await downloader.download(request)
                // Moves the clock whenever the transfer waits on it: its checkpointer and its
                // connection, waiting for the limiter.
                let driver = Self.drive(clock, sleepers: 2)
                _ = try await task.result()
                driver.cancel()
                await driver.value
            }
            #expect(sha256(file: temp.file("f")) == server.sha256("/f"))
            // 256 KiB at 64 KiB/s: four seconds, give or take the 100 ms steps.
            let taken = clock.now.offset
            #expect(taken >= .milliseconds(3900) && taken <= .milliseconds(4300), "\(taken)")
        }
    }

    @Test("a 503 with Retry-After: 30 is tried again 30 s later on the clock, not a moment sooner")
    func retryAfterOnTheClock() async throws {
        let temp = try TemporaryDirectory()
        let clock = TestClock()
        try await TestServer.withServer { server in
            server.set("/f", .init(size: 100_000, seed: 3, failFirst: 1, retryAfter: "30"))
            var configuration = testConfiguration(store: temp.file("s.sqlite"))
            configuration.retry = RetryPolicy(maxRetries: 3, maxDelay: .seconds(60))
            configuration.clock = clock
            try await Downloader.withDownloader(configuration: configuration) { downloader in
                let task = try await downloader.download(
                    DownloadRequest(url: server.url("/f"), destination: .directory(temp.path))
                )
                // The first answer was the 503: the download waits on the clock.
                await clock.waitForSleepers(1)
                #expect(server.requests(for: "/f").count == 1)
                clock.advance(by: .seconds(29))
                await clock.waitForSleepers(1)
                #expect(server.requests(for: "/f").count == 1, "tried again before Retry-After")
                clock.advance(by: .seconds(1))
                _ = try await task.result()
            }
            #expect(server.requests(for: "/f").count == 2)
            #expect(sha256(file: temp.file("f")) == server.sha256("/f"))
        }
    }

    /// The driver of a clock, replaced when what it waits for changes.
    final class Driver: Sendable {
        private let current: Mutex<Task<Void, Never>?>
        init(_ task: Task<Void, Never>) { current = Mutex(task) }
        func replace(with task: Task<Void, Never>?) async {
            let old = current.withLock { current in
                defer { current = task }
                return current
            }
            old?.cancel()
            await old?.value
        }
    }

    /// Moves `clock` on by `step` whenever at least `sleepers` wait on it (each transfer's
    /// checkpointer always does: count a connection waiting for the limiter with them), until
    /// cancelled; `at` is told each new time, so a test can act at a point of the clock.
    static func drive(
        _ clock: TestClock,
        sleepers: Int,
        step: Duration = .milliseconds(100),
        at: @escaping @Sendable (Duration) -> Void = { _ in }
    ) -> Task<Void, Never> {
        Task {
            while !Task.isCancelled {
                await clock.waitForSleepers(sleepers)
                if Task.isCancelled { break }
                clock.advance(by: step)
                at(clock.now.offset)
            }
        }
    }

    @Test("a download's limit holds over three connections together: 5 MiB at 640 KiB/s takes eight seconds")
    func limitOverConnections() async throws {
        let temp = try TemporaryDirectory()
        let clock = TestClock()
        try await TestServer.withServer { server in
            server.set("/f", .init(size: 5 << 20, seed: 8))
            var configuration = testConfiguration(store: temp.file("s.sqlite"), connections: 3)
            configuration.clock = clock
            try await Downloader.withDownloader(configuration: configuration) { downloader in
                var request = DownloadRequest(url: server.url("/f"), destination: .directory(temp.path))
                request.rateLimit = 640 << 10
                request.minSplitSize = 64 << 10
                let task = try await downloader.download(request)
                let driver = Self.drive(clock, sleepers: 2)
                _ = try await task.result()
                driver.cancel()
                await driver.value
            }
            #expect(sha256(file: temp.file("f")) == server.sha256("/f"))
            #expect(server.requests(for: "/f").count >= 3, "the download was split")
            let taken = clock.now.offset
            #expect(taken >= .milliseconds(7700) && taken <= .milliseconds(8500), "\(taken)")
        }
    }

    @Test("the overall limit is shared: two downloads of 2.5 MiB under 640 KiB/s overall take eight seconds together")
    func overallLimitShared() async throws {
        let temp = try TemporaryDirectory()
        let clock = TestClock()
        try await TestServer.withServer { server in
            server.set("/a", .init(size: 5 << 19, seed: 9))
            server.set("/b", .init(size: 5 << 19, seed: 10))
            var configuration = testConfiguration(store: temp.file("s.sqlite"))
            configuration.overallRateLimit = 640 << 10
            configuration.clock = clock
            try await Downloader.withDownloader(configuration: configuration) { downloader in
                let a = try await downloader.download(
                    DownloadRequest(url: server.url("/a"), destination: .directory(temp.path))
                )
                let b = try await downloader.download(
                    DownloadRequest(url: server.url("/b"), destination: .directory(temp.path))
                )
                // Both checkpointers and a connection waiting; once one download has ended,
                // the other's checkpointer and connection.
                let driver = Driver(Self.drive(clock, sleepers: 3))
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for task in [a, b] { group.addTask { _ = try await task.result() } }
                    try await group.next()
                    await driver.replace(with: Self.drive(clock, sleepers: 2))
                    try await group.next()
                }
                await driver.replace(with: nil)
            }
            #expect(sha256(file: temp.file("a")) == server.sha256("/a"))
            #expect(sha256(file: temp.file("b")) == server.sha256("/b"))
            let taken = clock.now.offset
            #expect(taken >= .milliseconds(7700) && taken <= .milliseconds(8500), "\(taken)")
        }
    }

    @Test(
        "a limit raised while the download runs applies at once: 1.25 MiB in 4 s at 320 KiB/s, the rest in 3 s at 1.25 MiB/s"
    )
    func raisedLimitApplies() async throws {
        let temp = try TemporaryDirectory()
        let clock = TestClock()
        try await TestServer.withServer { server in
            server.set("/f", .init(size: 5 << 20, seed: 11))
            var configuration = testConfiguration(store: temp.file("s.sqlite"))
            configuration.clock = clock
            try await Downloader.withDownloader(configuration: configuration) { downloader in
                var request = DownloadRequest(url: server.url("/f"), destination: .directory(temp.path))
                request.rateLimit = 320 << 10
                let task = try await downloader.download(request)
                let driver = Self.drive(clock, sleepers: 2) { now in
                    if now == .seconds(4) { task.setRateLimit(1280 << 10) }
                }
                _ = try await task.result()
                driver.cancel()
                await driver.value
            }
            #expect(sha256(file: temp.file("f")) == server.sha256("/f"))
            let taken = clock.now.offset
            #expect(taken >= .milliseconds(6700) && taken <= .milliseconds(7500), "\(taken)")
        }
    }

    /// A manager on `clock` whose transfers retry nothing themselves and whose tasks keep
    /// trying with a 30 s first delay.
    static func keepingTrying(
        _ temp: TemporaryDirectory,
        _ clock: TestClock,
        giveUpAfter: Duration
    ) -> DownloadManager.Configuration {
        var downloader = testConfiguration(store: temp.file("s.sqlite"), retries: 0)
        downloader.clock = clock
        var configuration = DownloadManager.Configuration(downloader: downloader, maxConcurrentDownloads: 2)
        configuration.keepsTrying = KeepTrying(giveUpAfter: giveUpAfter, firstDelay: .seconds(30))
        return configuration
    }

    @Test(
        "a task that keeps trying waits its backoff on the clock (22.5–30 s, then 45–60 s, then 90–120 s), not a moment less, and completes when the server answers"
    )
    func keepTryingBackoff() async throws {
        let temp = try TemporaryDirectory()
        let clock = TestClock()
        try await TestServer.withServer { server in
            server.set("/f", .init(size: 50_000, seed: 4, failFirst: 3))
            let configuration = Self.keepingTrying(temp, clock, giveUpAfter: .seconds(3600))
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                let task = try await manager.download(
                    DownloadRequest(url: server.url("/f"), destination: .directory(temp.path))
                )
                for attempt in 1...3 {
                    // Failed (a 503), and waiting on the clock for its next try.
                    #expect(try await waitUntil { try await manager.info(task.id).state == .retrying })
                    await clock.waitForSleepers(1)
                    let ceiling = Duration.seconds(30 << (attempt - 1))
                    clock.advance(by: ceiling * 0.75 - .seconds(1))
                    #expect(server.requests(for: "/f").count == attempt, "tried again before its backoff")
                    #expect(try await manager.info(task.id).state == .retrying)
                    clock.advance(by: ceiling * 0.25 + .seconds(1))
                    #expect(try await waitUntil { server.requests(for: "/f").count == attempt + 1 })
                }
                #expect(try await waitUntil { try await manager.info(task.id).state == .completed })
            }
            #expect(sha256(file: temp.file("f")) == server.sha256("/f"))
            #expect(clock.now.offset == .seconds(210))
        }
    }

    @Test(
        "a task that keeps failing gives up once it has tried for giveUpAfter (60 s) without progress: retrying, retrying, failed"
    )
    func keepTryingGivesUp() async throws {
        let temp = try TemporaryDirectory()
        let clock = TestClock()
        try await TestServer.withServer { server in
            server.set("/f", .init(size: 50_000, seed: 5, failFirst: 1000))
            let configuration = Self.keepingTrying(temp, clock, giveUpAfter: .seconds(60))
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                let events = manager.events()
                let task = try await manager.download(
                    DownloadRequest(url: server.url("/f"), destination: .directory(temp.path))
                )
                // t = 0: the first failure; t = 30: the second, 30 s into the streak; t = 90:
                // the third, past the 60 s it may last.
                for attempt in 1...2 {
                    #expect(try await waitUntil { try await manager.info(task.id).state == .retrying })
                    await clock.waitForSleepers(1)
                    clock.advance(by: .seconds(30 << (attempt - 1)))
                    #expect(try await waitUntil { server.requests(for: "/f").count == attempt + 1 })
                }
                #expect(try await waitUntil { try await manager.info(task.id).state == .failed })
                var states: [TaskState] = []
                for await event in events {
                    if case .stateChanged(let id, _, let to, _) = event, id == task.id {
                        states.append(to)
                        if to == .failed { break }
                    }
                }
                #expect(states == [.running, .retrying, .queued, .running, .retrying, .queued, .running, .failed])
                #expect(server.requests(for: "/f").count == 3)
            }
        }
    }

    @Test("a download with at most 64 KiB to fetch keeps no checkpointer waiting on the clock; a larger one does")
    func smallRunsUnwatched() async throws {
        let temp = try TemporaryDirectory()
        let clock = TestClock()
        try await TestServer.withServer { server in
            server.set("/small", .init(size: 48 << 10, seed: 11, holdAt: 16 << 10))
            server.set("/large", .init(size: 256 << 10, seed: 12, holdAt: 16 << 10))
            var configuration = testConfiguration(store: temp.file("s.sqlite"))
            configuration.clock = clock
            try await Downloader.withDownloader(configuration: configuration) { downloader in
                let small = try await downloader.download(
                    DownloadRequest(url: server.url("/small"), destination: .directory(temp.path))
                )
                // Held under way, its connection running: nothing of it waits on the clock.
                #expect(try await waitUntil { server.heldResponses == 1 })
                #expect(clock.sleepers == 0)
                let large = try await downloader.download(
                    DownloadRequest(url: server.url("/large"), destination: .directory(temp.path))
                )
                #expect(try await waitUntil { server.heldResponses == 2 })
                await clock.waitForSleepers(1)  // The large one's checkpointer, for its next tick.
                #expect(clock.sleepers == 1)
                server.release()
                _ = try await small.result()
                _ = try await large.result()
            }
            #expect(sha256(file: temp.file("small")) == server.sha256("/small"))
            #expect(sha256(file: temp.file("large")) == server.sha256("/large"))
        }
    }
}
