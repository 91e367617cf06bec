import Foundation
import HaulTestSupport
import HaulTesting
import Synchronization
import Testing

@testable import Haul

/// `--max-connections-per-host`: the connections the downloads to one host share, apart from
/// `--max-per-host` (downloads). Every running download holds one connection before any
/// holds a second; the widest gives way at a segment boundary while the host is over its cap.
@Suite("Connections per host", .timeLimit(.minutes(10)))
struct HostConnectionsTests {
    /// A waiter's answer, read once it has come.
    final class Answer: Sendable {
        private let value = Mutex<Bool?>(nil)
        func set(_ granted: Bool) { value.withLock { $0 = granted } }
        var granted: Bool? { value.withLock { $0 } }
    }

    /// Starts waiting for a connection of `share`; the answer lands in the returned box.
    static func waiting(_ share: HostConnections.Share) -> (Answer, Task<Void, Never>) {
        let answer = Answer()
        let task = Task { answer.set(await share.acquire()) }
        return (answer, task)
    }

    @Test("a download's first connection is granted at once, even when the others hold the whole cap")
    func firstAtOnce() async {
        let budget = HostConnections(cap: 2)
        let (a, b) = (budget.share(host: "h:80"), budget.share(host: "h:80"))
        #expect(await a.acquire())
        #expect(await a.acquire())
        #expect(budget.held(host: "h:80") == 2)
        #expect(await b.acquire())
        #expect(budget.held(host: "h:80") == 3)
        // Another host counts apart.
        #expect(await budget.share(host: "other:80").acquire())
        #expect(budget.held(host: "h:80") == 3)
    }

    @Test("over the cap the widest gives way once per connection too many; a narrower one never")
    func widestYields() async {
        let budget = HostConnections(cap: 4)
        let (wide, narrow, new) = (budget.share(host: "h"), budget.share(host: "h"), budget.share(host: "h"))
        for _ in 0..<3 { #expect(await wide.acquire()) }
        #expect(await narrow.acquire())
        #expect(!wide.shouldYield() && !narrow.shouldYield())  // At the cap, nobody waiting.
        #expect(await new.acquire())  // 5 of 4.
        #expect(!narrow.shouldYield())
        #expect(!new.shouldYield())
        #expect(wide.shouldYield())
        #expect(!wide.shouldYield(), "one connection too many: one gives way, not two")
        wide.giveBack(yielded: true)
        #expect(budget.held(host: "h") == 4)
        #expect(!wide.shouldYield())
    }

    @Test("a further connection waits while the host is full and goes to the download holding the fewest")
    func fewestFirst() async throws {
        let budget = HostConnections(cap: 4)
        let (a, b, c) = (budget.share(host: "h"), budget.share(host: "h"), budget.share(host: "h"))
        #expect(await a.acquire())
        #expect(await a.acquire())
        #expect(await b.acquire())
        #expect(await c.acquire())
        let (aAnswer, aTask) = Self.waiting(a)
        #expect(try await waitUntil { budget.waiting(host: "h") == 1 })
        let (bAnswer, bTask) = Self.waiting(b)
        #expect(try await waitUntil { budget.waiting(host: "h") == 2 })
        // a (2 held) waits ahead of b (1 held), but b holds fewer: b gets the one c frees.
        c.giveBack()
        #expect(try await waitUntil { bAnswer.granted == true })
        #expect(aAnswer.granted == nil)
        // Raising the cap lets a in too.
        budget.setCap(5)
        #expect(try await waitUntil { aAnswer.granted == true })
        await aTask.value
        await bTask.value
        #expect(budget.held(host: "h") == 5)
    }

    @Test("a waiting connection whose task is cancelled is answered no and leaves the line")
    func cancelledWaiter() async throws {
        let budget = HostConnections(cap: 1)
        let share = budget.share(host: "h")
        #expect(await share.acquire())
        let (answer, task) = Self.waiting(share)
        #expect(try await waitUntil { budget.waiting(host: "h") == 1 })
        task.cancel()
        await task.value
        #expect(answer.granted == false)
        #expect(budget.waiting(host: "h") == 0)
        share.giveBack()
        #expect(budget.held(host: "h") == 0)
    }

    @Test(
        "two throttled downloads with 4 connections each fill a cap of 8; a small third file on the same host starts at once and completes while they run"
    )
    func smallFileNotStarved() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            // A minute each: they cannot end before the small file, however loaded the machine.
            for name in ["big0", "big1"] {
                server.set("/\(name)", .init(size: 16 << 20, seed: 7, bytesPerSecond: 64 << 10))
            }
            server.set("/small", .init(size: 200 << 10, seed: 8))
            var downloader = testConfiguration(store: temp.file("home/haul.sqlite"), connections: 4)
            downloader.minSplitSize = 64 << 10
            var configuration = DownloadManager.Configuration(
                downloader: downloader,
                maxConcurrentDownloads: 3,
                maxDownloadsPerHost: 8
            )
            configuration.maxConnectionsPerHost = 8
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                let bigs = try await manager.download(
                    ["big0", "big1"].map {
                        DownloadRequest(url: server.url("/\($0)"), destination: .directory(temp.path), connections: 4)
                    }
                )
                #expect(try await waitUntil { server.activeResponses == 8 })
                let small = try await manager.download(
                    DownloadRequest(url: server.url("/small"), destination: .directory(temp.path))
                )
                #expect(
                    try await waitUntil(timeout: .seconds(30)) { try await manager.info(small.id).state == .completed },
                    "the small file waited behind the others' connections"
                )
                #expect(sha256(file: temp.file("small")) == server.sha256("/small"))
                for big in bigs { #expect(try await manager.info(big.id).state == .running) }
                // Never more than the cap and the one granted over it at once.
                #expect(server.maxActiveResponses <= 9)
                for big in bigs { try await manager.cancel(big.id) }
            }
        }
    }
}
