import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// Segmented downloads: one file over several connections, with work stealing, checked
/// byte for byte and by the exact requests the server saw.
@Suite("Segmented downloads", .timeLimit(.minutes(10)))
struct SegmentTests {
    static let size = 4 << 20

    /// `/f.bin` into the temp directory over `connections` with segments of at least `minSplit`.
    static func split(
        _ server: TestServer,
        _ temp: TemporaryDirectory,
        connections: Int,
        minSplit: Int
    ) -> DownloadRequest {
        DownloadRequest(
            url: server.url("/f.bin"),
            destination: .directory(temp.path),
            connections: connections,
            minSplitSize: Int64(minSplit)
        )
    }

    /// The `Range` header's first byte and last byte (nil when open-ended).
    @Test(
        "the file is byte-identical for any number of connections and split size",
        arguments: [(1, 64 << 10), (2, 64 << 10), (3, 1 << 20), (4, 256 << 10), (8, 64 << 10), (16, 512 << 10)]
    )
    func identicalAcrossSegmentCounts(connections: Int, minSplit: Int) async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, bytesPerSecond: 8 << 20))
            let task = try await downloader.download(
                Self.split(server, temp, connections: connections, minSplit: minSplit)
            )
            let result = try await task.result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(result.bytes == Int64(Self.size))
            #expect(!FileManager.default.fileExists(atPath: result.path + ".part"))

            let requests = server.requests(for: "/f.bin")
            #expect(requests.first?.header("Range") == nil, "the first request asks for the whole file")
            let ranged = requests.dropFirst()
            let expected = min(connections, Self.size / minSplit)
            #expect(ranged.count >= expected - 1, "one ranged request per extra connection at least")
            if connections == 1 { #expect(ranged.isEmpty) }
            for request in ranged {
                #expect(request.header("If-Range") == "\"v1-1\"", "every ranged request is conditional")
            }
            // Ranges never start twice at the same byte: no byte is fetched by two connections.
            let starts = ranged.compactMap { Fixtures.range($0)?.first }
            #expect(Set(starts).count == starts.count)
            #expect(starts.allSatisfy { $0 > 0 && $0 < Self.size })

            let segments = try await downloader.store.segments(of: task.id)
            #expect(segments.count >= expected)
            #expect(segments.allSatisfy { $0.committed == $0.end })
            let sorted = segments.sorted { $0.start < $1.start }
            #expect(sorted.first?.start == 0 && sorted.last?.end == Int64(Self.size))
            for (a, b) in zip(sorted, sorted.dropFirst()) { #expect(a.end == b.start, "segments tile the file") }
        }
    }

    @Test("a slow connection's segment is split by the idle ones (work stealing)")
    func slowConnectionIsStolenFrom() async throws {
        try await withHarness { server, downloader, temp in
            // The first connection (no Range header) crawls; the ranged ones are fast.
            // Slow enough that on a loaded machine, too, the first segment has the most left.
            server.set("/f.bin", .init(size: Self.size, unrangedBytesPerSecond: 64 << 10))
            let result = try await downloader.download(
                Self.split(server, temp, connections: 4, minSplit: 64 << 10)
            ).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let starts = server.requests(for: "/f.bin").compactMap(Fixtures.range).map(\.first)
            // Without stealing, the first quarter alone would take 16 s at 64 KiB/s.
            #expect(
                starts.contains { $0 > 0 && $0 < Self.size / 4 },
                "another connection took part of the first segment: \(starts)"
            )
            #expect(starts.count > 3, "more ranged requests than the initial split: \(starts)")
        }
    }

    @Test("pause keeps every segment; the resume asks each for its committed offset")
    func pauseAndResumeSegments() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, bytesPerSecond: 1 << 20))
            let request = Self.split(server, temp, connections: 4, minSplit: 256 << 10)
            let task = try await downloader.download(request)
            #expect(try await waitUntil { task.progress.bytesReceived > 1 << 20 })
            let resumeData = try await task.pause()
            #expect(resumeData.segments.count >= 4, "four, or more after a steal")
            #expect(resumeData.segments.filter { $0.committed > $0.start }.count >= 2)
            let unfinished = resumeData.segments.filter { $0.committed < $0.end! }
            let before = server.requests(for: "/f.bin").count

            server.update("/f.bin") { $0.bytesPerSecond = nil }
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let resumed = server.requests(for: "/f.bin").dropFirst(before)
            let starts = Set(resumed.compactMap { Fixtures.range($0)?.first })
            for segment in unfinished {
                let overlap = min(segment.committed - segment.start, TransferRules.overlapLength)
                #expect(
                    starts.contains(Int(segment.committed - overlap)),
                    "segment \(segment) resumed at its committed offset, less the overlap it compares"
                )
            }
            #expect(resumed.allSatisfy { $0.header("If-Range") == "\"v1-1\"" })
            #expect(!starts.contains(0), "nothing was fetched from the start again")
            #expect(
                result.bytesFetched <= Int64(Self.size) - resumeData.bytesCommitted + Int64(resumed.count) * (256 << 10)
            )
        }
    }

    @Test("a segment with nothing yet may start beyond the part file's end; the resume keeps every segment")
    func untouchedSegmentBeyondPartEnd() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size))
            var resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: 1 << 20,
                validators: Validators(etag: "\"v1-1\"", totalLength: Int64(Self.size))
            )
            // The second half's connection had not written a byte: the part file ends at 1 MiB.
            resumeData.segments = [
                .init(start: 0, end: 2 << 20, committed: 1 << 20),
                .init(start: 2 << 20, end: Int64(Self.size), committed: 2 << 20),
            ]
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(result.bytesFetched == Int64(Self.size) - (1 << 20))
            let ranges = server.requests(for: "/f.bin").map { $0.header("Range") }
            // The first segment re-reads 64 KiB before its committed offset; the untouched one has none.
            #expect(Set(ranges) == ["bytes=\((1 << 20) - 65536)-\((2 << 20) - 1)", "bytes=\(2 << 20)-"], "\(ranges)")
        }
    }

    @Test("a changed file seen on one segment's response restarts everything with it; never mixed")
    func changedFileOnOneSegmentRestarts() async throws {
        let temp = try TemporaryDirectory()
        let configuration = testConfiguration(store: temp.file("home/haul.sqlite"), retries: 5)
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: Self.size, bytesPerSecond: 1 << 20))
            // The paused run has its own client: once it is shut down and the server has seen
            // its connections close, every request it sent is counted, however late it arrived.
            let resumeData = try await Downloader.withDownloader(configuration: configuration) { downloader in
                let task = try await downloader.download(
                    Self.split(server, temp, connections: 4, minSplit: 256 << 10)
                )
                #expect(try await waitUntil { task.progress.bytesReceived > 1 << 20 })
                return try await task.pause()
            }
            #expect(try await waitUntil { server.openConnections == 0 })
            #expect(resumeData.segments.count > 1)
            let oldDigest = server.sha256("/f.bin")
            server.bumpVersion("/f.bin")
            server.update("/f.bin") { $0.bytesPerSecond = nil }
            let before = server.requests(for: "/f.bin").count

            try await Downloader.withDownloader(configuration: configuration) { downloader in
                let result = try await downloader.download(resumingFrom: resumeData).result()
                #expect(sha256(file: result.path) == server.sha256("/f.bin"))
                #expect(sha256(file: result.path) != oldDigest)
            }
            let resumed = Array(server.requests(for: "/f.bin").dropFirst(before))
            // The resumed connections asked with the old ETag (one each, at most); the first
            // 200 was written from byte 0 and the rest split again under the new ETag.
            let old = resumed.filter { $0.header("If-Range") == "\"v1-1\"" }
            #expect(!old.isEmpty && old.count <= 4, "\(resumed.map { $0.header("If-Range") })")
            #expect(resumed.contains { $0.header("If-Range") == "\"v2-1\"" })
            #expect(resumed.allSatisfy { $0.header("Range") != nil }, "the 200 was used; no fresh request from 0")
        }
    }

    @Test("a changed file seen while the connections run restarts the download; never mixed")
    func changeDuringSegmentedTransfer() async throws {
        try await withHarness { server, downloader, temp in
            // A crawling first connection, so the others steal from it after the change.
            server.set("/f.bin", .init(size: Self.size, bytesPerSecond: 1 << 20, unrangedBytesPerSecond: 128 << 10))
            let oldDigest = server.sha256("/f.bin")
            let task = try await downloader.download(
                Self.split(server, temp, connections: 4, minSplit: 64 << 10)
            )
            #expect(try await waitUntil { task.progress.bytesReceived > 256 << 10 })
            // Responses under way keep sending the old bytes; every new request sees version 2,
            // and the first steal's If-Range fails with a 200 of the new file.
            server.bumpVersion("/f.bin")
            server.update("/f.bin") {
                $0.bytesPerSecond = nil
                $0.unrangedBytesPerSecond = nil
            }
            let result = try await task.result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(sha256(file: result.path) != oldDigest)
            #expect(server.requests(for: "/f.bin").contains { $0.header("If-Range") == "\"v2-1\"" })
        }
    }

    @Test("a 206 with a different total on one segment restarts the whole download")
    func wrongTotalOnASegment() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, bytesPerSecond: 2 << 20))
            let task = try await downloader.download(
                Self.split(server, temp, connections: 4, minSplit: 256 << 10)
            )
            #expect(try await waitUntil { task.progress.bytesReceived > 512 << 10 })
            let resumeData = try await task.pause()
            server.update("/f.bin") {
                $0.contentRangeFault = .wrongTotal(1)
                $0.faultyResponses = 1
                $0.bytesPerSecond = nil
            }
            let before = server.requests(for: "/f.bin").count
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let resumed = Array(server.requests(for: "/f.bin").dropFirst(before))
            // After the bad 206, the download began again with an unconditional request.
            #expect(resumed.contains { $0.header("Range") == nil }, "\(resumed.map { $0.header("Range") })")
        }
    }

    @Test("connections the server refuses (503) hand their segments to the others; the file is whole")
    func refusedConnectionsStepAside() async throws {
        try await withHarness(retries: 0) { server, downloader, temp in
            // Two of the three extra connections are refused; with no retries allowed, they
            // can only finish by handing their segments to the connections that work.
            server.set("/f.bin", .init(size: Self.size, bytesPerSecond: 4 << 20, failRanged: 2))
            let result = try await downloader.download(
                Self.split(server, temp, connections: 4, minSplit: 256 << 10)
            ).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(result.bytes == Int64(Self.size))
            let ranged = server.requests(for: "/f.bin").filter { $0.header("Range") != nil }
            #expect(ranged.count >= 5, "3 first tries (2 refused), then the refused segments again: \(ranged.count)")
        }
    }

    @Test("without a validator or without ranges the download stays on one connection")
    func noSplitWithoutValidatorOrRanges() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/a.bin", .init(size: Self.size, etag: .none, lastModified: nil))
            server.set("/b.bin", .init(size: Self.size, ranges: false))
            for path in ["/a.bin", "/b.bin"] {
                let result = try await downloader.download(
                    DownloadRequest(url: server.url(path), destination: .directory(temp.path), connections: 8)
                ).result()
                #expect(sha256(file: result.path) == server.sha256(path))
                #expect(server.requests(for: path).count == 1, "\(path)")
            }
        }
    }
}

/// The plan's bookkeeping on its own: splits, claims, steals and the invariants.
@Suite("Segment plan", .timeLimit(.minutes(10)))
struct SegmentPlanTests {
    func plan(_ size: Int64, minSplit: Int64 = 10) -> SegmentPlan {
        SegmentPlan([SegmentRecord(taskID: UUID(), ordinal: 0, start: 0, end: size, committed: 0)], minSplit: minSplit)
    }

    @Test("a split gives equal parts, the first to the owner; claims hand out the rest")
    func splitAndClaim() {
        let plan = plan(100)
        plan.own(0)
        #expect(plan.split(0, into: 4) == 3)
        let records = plan.records(taskID: UUID())
        #expect(records.map(\.start) == [0, 25, 50, 75])
        #expect(records.map(\.end) == [25, 50, 75, 100])
        #expect([plan.claim(), plan.claim(), plan.claim()] == [1, 2, 3])
        #expect(plan.owners == 4)
    }

    @Test("a split never makes pieces below the minimum")
    func splitRespectsMinimum() {
        let plan = plan(100, minSplit: 40)
        plan.own(0)
        #expect(plan.split(0, into: 8) == 1)
        #expect(plan.records(taskID: UUID()).map(\.end) == [50, 100])
    }

    @Test("an idle connection steals the back half of the largest remaining segment, past what was accepted")
    func stealing() {
        let plan = plan(100)
        plan.own(0)
        #expect(plan.accept(30, segmentStart: 0) == (30, false))
        let stolen = plan.claim()
        #expect(stolen == 1)
        // 70 left after byte 30: the thief takes the back 35.
        #expect(plan.records(taskID: UUID()).map(\.start) == [0, 65])
        #expect(plan.segment(0).end == 65)
        // The victim may accept only up to its new end.
        #expect(plan.accept(50, segmentStart: 0) == (35, true))
        #expect(plan.accept(1, segmentStart: 0) == (0, true))
    }

    @Test("nothing is stolen when the half would be below the minimum")
    func noTinySteals() {
        let plan = plan(100, minSplit: 30)
        plan.own(0)
        _ = plan.accept(50, segmentStart: 0)
        #expect(plan.claim() == nil)
    }

    @Test("a released segment continues from what was written, not what was accepted")
    func releaseRewindsToWritten() {
        let plan = plan(100)
        plan.own(0)
        _ = plan.accept(40, segmentStart: 0)
        plan.wrote(upTo: 20, segmentStart: 0)
        plan.free(segmentStart: 0)
        #expect(plan.claim() == 0)
        #expect(plan.segment(0).received == 20)
    }

    @Test("checkpoints commit what was written when the snapshot was taken")
    func commitSnapshot() {
        let plan = plan(100)
        plan.own(0)
        _ = plan.accept(60, segmentStart: 0)
        plan.wrote(upTo: 40, segmentStart: 0)
        let snapshot = plan.snapshotWritten(taskID: UUID())
        plan.wrote(upTo: 60, segmentStart: 0)
        plan.committed(snapshot)
        #expect(plan.records(taskID: UUID()).first?.committed == 40)
        #expect(plan.bytesWritten == 60)
    }

    @Test("spreading a resume halves the largest unfinished segments, one per connection")
    func spread() {
        let plan = SegmentPlan(
            [
                SegmentRecord(taskID: UUID(), ordinal: 0, start: 0, end: 50, committed: 50),
                SegmentRecord(taskID: UUID(), ordinal: 1, start: 50, end: 100, committed: 60),
            ],
            minSplit: 5
        )
        plan.spread(over: 4)
        #expect(plan.unfinished == 4)
        let records = plan.records(taskID: UUID())
        #expect(records.first?.committed == 50)
        for (a, b) in zip(records, records.dropFirst()) { #expect(a.end == b.start) }
    }
}

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
