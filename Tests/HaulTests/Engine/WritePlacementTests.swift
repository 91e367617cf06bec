import AsyncHTTPClient
import Foundation
import HaulTestSupport
import HaulTesting
import Logging
import NIOCore
import NIOPosix
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

    @Test("a loop ahead of the writer (64 KiB waiting behind the batch) reads on while the pool writes")
    func loopAhead() async throws {
        let fixture = try Fixture()
        let loop = fixture.loop
        _ = try await loop.submit { fixture.pipe.receive(ByteBuffer(repeating: 1, count: (64 << 10) - 1), on: loop) }
            .get()
        #expect(fixture.placement.loop(for: fixture.site, part: fixture.part, pace: .init()) != nil)
        _ = try await loop.submit { fixture.pipe.receive(ByteBuffer(repeating: 1, count: 1), on: loop) }.get()
        #expect(fixture.placement.loop(for: fixture.site, part: fixture.part, pace: .init()) == nil)
        fixture.pipe.abandon()
        try await fixture.shutdown()
    }

    @Test("a connection whose writes take more than a quarter of its time writes on the pool")
    func busyPace() async throws {
        var pace = WritePlacement.Pace()
        pace.wrote(from: .zero, to: .milliseconds(3))
        // The first write has no interval to measure against.
        #expect(!pace.isBusy)
        pace.wrote(from: .milliseconds(4), to: .milliseconds(5))
        #expect(!pace.isBusy)
        pace.wrote(from: .milliseconds(8), to: .microseconds(9_001))
        #expect(pace.isBusy)
        let fixture = try Fixture()
        #expect(fixture.placement.loop(for: fixture.site, part: fixture.part, pace: pace) == nil)
        pace.wrote(from: .milliseconds(20), to: .milliseconds(21))
        #expect(!pace.isBusy)
        try await fixture.shutdown()
    }

    @Test("a slow write on a loop sends every write to the pool for the cooldown, and not a moment longer")
    func slowWriteCoolsDown() async throws {
        let fixture = try Fixture()
        let (clock, placement) = (fixture.clock, fixture.placement)
        // Just under slow: the loop keeps the writes.
        try await placement.write(on: fixture.loop) { clock.advance(by: WritePlacement.slow - .nanoseconds(1)) }
        #expect(placement.loop(for: fixture.site, part: fixture.part, pace: .init()) != nil)
        try await placement.write(on: fixture.loop) { clock.advance(by: WritePlacement.slow) }
        #expect(placement.loop(for: fixture.site, part: fixture.part, pace: .init()) == nil)
        clock.advance(by: WritePlacement.cooldown - .nanoseconds(1))
        #expect(placement.loop(for: fixture.site, part: fixture.part, pace: .init()) == nil)
        clock.advance(by: .nanoseconds(1))
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
