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

    /// Resume data for `/f.bin` over two segments, as a paused run would leave it: the first
    /// half committed to 1 MiB, the second half untouched (the part file ends at 1 MiB).
    static func twoSegmentResume(_ server: TestServer, _ temp: TemporaryDirectory) throws -> ResumeData {
        var resumeData = try seedPartial(
            server,
            "/f.bin",
            into: temp.path,
            name: "f.bin",
            committed: 1 << 20,
            validators: Validators(etag: "\"v1-1\"", totalLength: Int64(size))
        )
        resumeData.segments = [
            .init(start: 0, end: 2 << 20, committed: 1 << 20),
            .init(start: 2 << 20, end: Int64(size), committed: 2 << 20),
        ]
        return resumeData
    }

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
            // The second half's connection had not written a byte: the part file ends at 1 MiB.
            let resumeData = try Self.twoSegmentResume(server, temp)
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
            // A resume over two segments, seeded rather than paused: every request the server
            // sees is this download's (a paused run's request can reach a loaded server late and
            // take the fault meant for the resumed one).
            server.set("/f.bin", .init(size: Self.size, faultyResponses: 1, contentRangeFault: .wrongTotal(1)))
            let resumeData = try Self.twoSegmentResume(server, temp)
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let ranges = server.requests(for: "/f.bin").map { $0.header("Range") }
            // The segments asked for their ranges; after the bad 206 the download began again
            // with an unconditional request, and the whole file came from 0.
            #expect(ranges.first.flatMap { $0 } != nil, "\(ranges)")
            #expect(ranges.contains { $0 == nil }, "\(ranges)")
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
