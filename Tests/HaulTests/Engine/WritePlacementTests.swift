import AsyncHTTPClient
import Foundation
import HaulTestSupport
import HaulTesting
import Logging
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import Haul

/// Where a batch of received bytes is written (``WritePlacement``): on the event loop that read
/// it while that is cheap, else on ``FileIO``'s threads. Decided on a test clock.
@Suite("Where received bytes are written", .timeLimit(.minutes(1)))
struct WritePlacementTests {
    /// A placement on a test clock, a part file on this machine's disk, and a loop that reads.
    struct Fixture {
        let clock = TestClock()
        let placement: WritePlacement
        let temp: TemporaryDirectory
        let part: PartFile
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let pipe = BodyPipe()

        init() throws {
            placement = WritePlacement(timeline: Timeline(clock))
            temp = try TemporaryDirectory()
            part = try PartFile.create(at: temp.file("f.part"), owner: UUID())
        }

        var loop: any EventLoop { group.next() }
        var site: ReadSite { ReadSite(loop: loop, pipe: pipe) }

        func shutdown() async throws {
            part.close()
            try await group.shutdownGracefully()
        }
    }

    @Test("a batch is written on the loop that read it, when the file is on a local disk")
    func onTheLoop() async throws {
        let fixture = try Fixture()
        #expect(fixture.part.isOnLocalDisk)
        let chosen = fixture.placement.loop(for: fixture.site, part: fixture.part, pace: .init())
        #expect(chosen === fixture.loop)
        #expect(fixture.placement.loop(for: nil, part: fixture.part, pace: .init()) == nil)
        #expect(fixture.placement.writes == (onLoop: 1, onPool: 1))
        try await fixture.shutdown()
    }

    @Test("a file on another kind of file system is written on the pool")
    func notALocalDisk() async throws {
        let fixture = try Fixture()
        let proc = try PartFile(readingAt: "/proc/self/stat")
        #expect(!proc.isOnLocalDisk)
        #expect(fixture.placement.loop(for: fixture.site, part: proc, pace: .init()) == nil)
        proc.close()
        try await fixture.shutdown()
    }

    @Test("a loop waiting for its writer (its pipe at its bound) reads on while the pool writes")
    func loopWaiting() async throws {
        let fixture = try Fixture()
        let loop = fixture.loop
        let bound = fixture.pipe.limits.bound
        _ = try await loop.submit { fixture.pipe.receive(ByteBuffer(repeating: 1, count: bound - 1), on: loop) }.get()
        #expect(fixture.placement.loop(for: fixture.site, part: fixture.part, pace: .init()) != nil)
        _ = try await loop.submit { fixture.pipe.receive(ByteBuffer(repeating: 1, count: 1), on: loop) }.get()
        #expect(fixture.placement.loop(for: fixture.site, part: fixture.part, pace: .init()) == nil)
        fixture.pipe.abandon()
        try await fixture.shutdown()
    }

    @Test("a part file being synced is written on the pool, and on the loop again once the sync is over")
    func whileSyncing() async throws {
        let fixture = try Fixture()
        let chosen = fixture.part.syncing {
            fixture.placement.loop(for: fixture.site, part: fixture.part, pace: .init())
        }
        #expect(chosen == nil)
        #expect(!fixture.part.isSyncing)
        #expect(fixture.placement.loop(for: fixture.site, part: fixture.part, pace: .init()) != nil)
        try await fixture.shutdown()
    }

    @Test("a connection whose writes take more than a quarter of a span writes on the pool; a burst does not")
    func busyPace() async throws {
        var pace = WritePlacement.Pace()
        // A burst: two 256 KiB batches written back to back, then a pause (nginx's limit_rate).
        pace.wrote(taking: .milliseconds(1), endingAt: .milliseconds(1))
        pace.wrote(taking: .milliseconds(1), endingAt: .milliseconds(2))
        #expect(!pace.isBusy)
        // 10 ms of writing in a span of 100 ms: not busy.
        for end in stride(from: 10, through: 100, by: 10) {
            pace.wrote(taking: .milliseconds(1), endingAt: .milliseconds(end))
        }
        #expect(!pace.isBusy)
        // The next span: 26 ms of 100 writing; busy once the span is whole, not before.
        pace.wrote(taking: .milliseconds(25), endingAt: .milliseconds(150))
        #expect(!pace.isBusy)
        pace.wrote(taking: .milliseconds(1), endingAt: .milliseconds(200))
        #expect(pace.isBusy)
        let fixture = try Fixture()
        #expect(fixture.placement.loop(for: fixture.site, part: fixture.part, pace: pace) == nil)
        // Exactly a quarter is not busy.
        pace.wrote(taking: .milliseconds(25), endingAt: .milliseconds(300))
        #expect(!pace.isBusy)
        try await fixture.shutdown()
    }

    @Test("a slow write on a loop sends every write to the pool for a hundred times as long, and not a moment longer")
    func slowWriteCoolsDown() async throws {
        let fixture = try Fixture()
        let (clock, placement) = (fixture.clock, fixture.placement)
        func onLoop() -> Bool { placement.loop(for: fixture.site, part: fixture.part, pace: .init()) != nil }
        // Just under slow: the loop keeps the writes.
        _ = try await placement.write(on: fixture.loop) { clock.advance(by: WritePlacement.slow - .nanoseconds(1)) }
        #expect(onLoop())
        let took = try await placement.write(on: fixture.loop) { clock.advance(by: .milliseconds(30)) }
        #expect(took == .milliseconds(30))
        #expect(!onLoop())
        clock.advance(by: .seconds(3) - .nanoseconds(1))
        #expect(!onLoop())
        clock.advance(by: .nanoseconds(1))
        #expect(onLoop())
        // A long stall keeps the pool for a minute at most; a shorter one after it does not cut that.
        _ = try await placement.write(on: fixture.loop) { clock.advance(by: .seconds(2)) }
        _ = try await placement.write(on: fixture.loop) { clock.advance(by: WritePlacement.slow) }
        clock.advance(by: WritePlacement.longestCooldown - WritePlacement.slow - .nanoseconds(1))
        #expect(!onLoop())
        clock.advance(by: .nanoseconds(1))
        #expect(onLoop())
        try await fixture.shutdown()
    }

    @Test("a write on the pool is timed where it runs, and however long it takes it sends nothing to the pool")
    func poolWriteTimed() async throws {
        let fixture = try Fixture()
        let (clock, placement) = (fixture.clock, fixture.placement)
        let loop = fixture.loop
        let ranOnLoop = Mutex<Bool?>(nil)
        let took = try await placement.write(on: nil) {
            ranOnLoop.withLock { $0 = loop.inEventLoop }
            clock.advance(by: .seconds(1))
        }
        #expect(took == .seconds(1))
        #expect(ranOnLoop.withLock { $0 } == false)
        #expect(placement.loop(for: fixture.site, part: fixture.part, pace: .init()) != nil)
        try await fixture.shutdown()
    }

    @Test("a task that prefers a loop runs on its thread, and comes back to it after each suspension")
    func taskOnTheLoop() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let seen = try await withTaskExecutorPreference(LoopExecutor(loop)) { () async throws -> [Bool] in
            var seen = [loop.inEventLoop]
            await Task.yield()
            seen.append(loop.inEventLoop)
            try await FileIO.run {}
            seen.append(loop.inEventLoop)
            return seen
        }
        #expect(seen == [true, true, true])
        #expect(!loop.inEventLoop)
        try await group.shutdownGracefully()
    }

    @Test("a response is read on the downloads' own loops, not on NIO's shared ones where a daemon serves its API")
    func loopsOfTheirOwn() async throws {
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 1 << 10))
            let clients = ClientPool(configuration: HTTPClient.Configuration())
            let transport = HTTPTransport(clients: clients, maxRedirects: 5, userAgent: "haul-test")
            let response = try await transport.get(
                server.url("/f.bin"),
                headers: [],
                range: nil,
                ifRange: nil,
                logger: Logger(label: "test")
            )
            await HTTPTransport.discard(response.head.body)
            let loop = try #require(response.site?.loop)
            #expect(ClientPool.loops.makeIterator().contains { $0 === loop })
            #expect(!MultiThreadedEventLoopGroup.singleton.makeIterator().contains { $0 === loop })
            try await clients.shutdown()
        }
    }

    @Test("a download paced by its server is written on its connection's loop, byte for byte")
    func downloadWritesOnTheLoop() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/paced.bin", .init(size: 512 << 10, seed: 36, bytesPerSecond: 4 << 20))
            let result = try await fetch(server, "/paced.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/paced.bin"))
            #expect(downloader.writePlacement.writes.onLoop >= 1)
        }
    }
}
