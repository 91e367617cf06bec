import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// `--limit-rate` and the overall limit: a token bucket, changeable while downloads run.
///
/// Measured on `haul` processes fetching from nginx, by the bytes their part files hold over
/// several seconds: inside the test process the downloads would share threads with every
/// suite running at once, and on a busy machine fall short of the limit for that reason
/// alone. A missing nginx skips these locally and fails them in CI.
@Suite("Rate limits", .serialized, .tags(.process, .nginx, .slow), .leftOutOfFastLoop, .timeLimit(.minutes(20)))
struct RateLimitTests {
    static let nginxUsable = ExternalServer.nginx != nil || ExternalServer.isCI

    @Test("removing a 1 B/s limit wakes the sleeping connection at once")
    func removingALimitWakes() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 2 << 20))
            try await Self.removeLimitThenFinish(server, downloader, temp.path)
        }
    }

    static func removeLimitThenFinish(_ server: TestServer, _ downloader: Downloader, _ directory: String) async throws
    {
        let task = try await downloader.download(
            DownloadRequest(url: server.url("/f.bin"), destination: .directory(directory), rateLimit: 1)
        )
        // The first chunk puts the connection to sleep for hours at 1 B/s.
        #expect(try await waitUntil { task.limiter.sleepingConnections > 0 })
        task.setRateLimit(nil)
        // Bounded: a connection still asleep fails here instead of hanging the suite. What
        // the client received counts, not what the server sent: loopback socket buffers
        // take the whole file while the client sleeps.
        let woke = try await waitUntil(timeout: .seconds(30)) { task.progress.bytesReceived >= 2 << 20 }
        #expect(woke, "the connection still sleeps on the removed limit")
        if !woke { await task.cancel() }
        let path = try await task.result().path
        #expect(sha256(file: path) == server.sha256("/f.bin"))
    }

    /// A limit holds: never above it by more than the measurement's 10 %. A loaded machine
    /// only makes transfers slower, so this bound is exact there too. How a limit paces a
    /// download over time is tested on a test clock (ClockTests); how close Haul gets to a
    /// limit is measured by Benchmarks/run's throttled workload, not asserted here.
    static func expectHeld(
        _ rate: Double,
        limit: Int,
        _ what: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let ratio = rate / Double(limit)
        #expect(ratio <= 1.10, "measured \(Int(rate)) B/s \(what): over the limit", sourceLocation: sourceLocation)
    }

    /// Bytes the files hold on disk (allocated blocks: segments leave holes between them).
    static func written(_ paths: [String]) -> Int64 {
        paths.reduce(0) { total, path in
            var info = stat()
            return total + (stat(path, &info) == 0 ? Int64(info.st_blocks) * 512 : 0)
        }
    }

    /// Bytes per second written to `paths` together while they grow by `bytes`, once they
    /// hold `after` bytes (past the start, whose first chunks a limiter lets through at
    /// once). Connections write at least every 200 ms, so a window of several seconds is
    /// within a few percent; a loaded machine only makes it longer, and the rate lower.
    static func rate(of paths: [String], past after: Int64, across bytes: Int64) async throws -> Double {
        #expect(try await waitUntil { written(paths) >= after }, "never reached \(after) bytes")
        let (start, before) = (ContinuousClock.now, written(paths))
        let grew = try await waitUntil(every: .milliseconds(50)) {
            written(paths) >= before + bytes
        }
        #expect(grew, "\(paths) did not grow by \(bytes) bytes in a minute")
        let (end, now) = (ContinuousClock.now, written(paths))
        return Double(now - before) / (end - start).seconds
    }

    /// nginx serving `names` (24 MiB each), an output directory and a home.
    func withNginx(
        _ names: [String],
        _ body: (ExternalServer, _ out: String, _ home: String) async throws -> Void
    ) async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        try await ExternalServer.with(try await ExternalServer.startNginx()) { server in
            for (index, name) in names.enumerated() {
                let bytes = TestContent.bytes(count: 24 << 20, seed: UInt64(index + 1))
                try Data(bytes).write(to: URL(fileURLWithPath: server.root + "/" + name))
            }
            try await body(server, out, temp.file("home"))
        }
    }

    @Test(
        "haul get --limit-rate 1M holds, over 1 and over 3 connections",
        .enabled(if: nginxUsable),
        arguments: [1, 3]
    )
    func perDownloadLimit(connections: Int) async throws {
        try await withNginx(["f.bin"]) { server, out, home in
            let child = try HaulProcess(
                [
                    "get", "-q", "-x", "\(connections)", "--min-split", "64K", "--limit-rate", "1M", "-d", out,
                    server.url("/f.bin").absoluteString,
                ],
                home: home
            )
            let part = [out + "/f.bin.part"]
            let rate = try await Self.rate(of: part, past: 512 << 10, across: 5 << 20)
            Self.expectHeld(rate, limit: 1 << 20, "for a limit of 1 MiB/s")
            child.kill(SIGTERM)
            _ = await child.finish()
        }
    }

    @Test("the daemon's limits change while running: a task's own, then the overall one", .enabled(if: nginxUsable))
    func liveChanges() async throws {
        try await withNginx(["a.bin", "b.bin"]) { server, out, home in
            let added = try await HaulProcess.run(
                ["add", "--limit-rate", "512K", "-d", out, server.url("/a.bin").absoluteString],
                home: home
            )
            #expect(added.status == 0, "\(added.stderr)")
            let id = added.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            let a = [out + "/a.bin.part"]
            #expect(try await waitUntil { Self.written(a) > 0 })

            #expect(try await HaulProcess.run(["set", "--limit-rate", "2M", id], home: home).status == 0)
            let raised = try await Self.rate(of: a, past: Self.written(a) + (512 << 10), across: 6 << 20)
            Self.expectHeld(raised, limit: 2 << 20, "after raising to 2 MiB/s")
            // Above the old limit: the daemon passed the raise from 512 KiB/s on.
            #expect(raised > 1.1 * Double(512 << 10), "measured \(Int(raised)) B/s after raising from 512 KiB/s")

            // Two downloads under an overall limit of 1 MiB/s share it.
            #expect(try await HaulProcess.run(["set", "--limit-rate", "1M"], home: home).status == 0)
            #expect(try await HaulProcess.run(["set", "--limit-rate", "0", id], home: home).status == 0)
            let second = try await HaulProcess.run(["add", "-d", out, server.url("/b.bin").absoluteString], home: home)
            #expect(second.status == 0, "\(second.stderr)")
            let both = a + [out + "/b.bin.part"]
            #expect(try await waitUntil { Self.written([both[1]]) > 0 })
            let total = try await Self.rate(of: both, past: Self.written(both) + (512 << 10), across: 4 << 20)
            Self.expectHeld(total, limit: 1 << 20, "together for 1 MiB/s overall")
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }
}
