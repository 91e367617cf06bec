import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

extension MirrorTests {
    /// Mirrors across a pause and in resume data, a mirror failing once checked, a rate limit over all sources, and mirrors checked as URLs.
    @Suite("Mirrors: resuming, failing, limits and checks")
    struct Resuming {
        @Test("pause and resume: each source is asked with its own If-Range, and no mirror is checked twice")
        func pauseAndResume() async throws {
            try await TestServer.withServer { a in
                try await TestServer.withServer { b in
                    let temp = try TemporaryDirectory()
                    a.set("/f.bin", .init(size: MirrorTests.size, etag: .fixed("\"a-1\""), bytesPerSecond: 512 << 10))
                    b.set("/f.bin", .init(size: MirrorTests.size, etag: .fixed("\"b-1\""), bytesPerSecond: 512 << 10))
                    try await Downloader.withDownloader(
                        configuration: testConfiguration(store: temp.file("haul.sqlite"))
                    ) { downloader in
                        let task = try await downloader.download(
                            MirrorTests.request(a.url("/f.bin"), mirrors: [b.url("/f.bin")], into: temp, connections: 4)
                        )
                        #expect(try await waitUntil { task.progress.bytesReceived > 2 << 20 })
                        let resumeData = try await task.pause()
                        let paused = try await MirrorTests.task(downloader, task.id)
                        #expect(paused.sources[1].verified && paused.sources[1].validators?.etag == "\"b-1\"")
                        #expect(paused.sources[1].bytes > 0, "the mirror's bytes are recorded with the checkpoint")
                        let (beforeA, beforeB) = (a.requests(for: "/f.bin").count, b.requests(for: "/f.bin").count)

                        a.update("/f.bin") { $0.bytesPerSecond = 4 << 20 }
                        b.update("/f.bin") { $0.bytesPerSecond = 4 << 20 }
                        let result = try await downloader.download(resumingFrom: resumeData).result()
                        #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                        let resumedA = a.requests(for: "/f.bin").dropFirst(beforeA)
                        let resumedB = b.requests(for: "/f.bin").dropFirst(beforeB)
                        #expect(!resumedA.isEmpty && !resumedB.isEmpty, "both sources served the rest")
                        #expect(resumedA.allSatisfy { $0.header("If-Range") == "\"a-1\"" })
                        #expect(resumedB.allSatisfy { $0.header("If-Range") == "\"b-1\"" })
                    }
                }
            }
        }

        @Test(
            "resume data carries the mirrors: resumed in another store, both serve the rest, the mirror checked again"
        )
        func resumeDataCarriesMirrors() async throws {
            try await TestServer.withServer { a in
                try await TestServer.withServer { b in
                    let temp = try TemporaryDirectory()
                    a.set("/f.bin", .init(size: MirrorTests.size, etag: .fixed("\"a-1\""), bytesPerSecond: 512 << 10))
                    b.set("/f.bin", .init(size: MirrorTests.size, etag: .fixed("\"b-1\""), bytesPerSecond: 512 << 10))
                    let resumeData = try await Downloader.withDownloader(
                        configuration: testConfiguration(store: temp.file("first.sqlite"))
                    ) { downloader in
                        let task = try await downloader.download(
                            MirrorTests.request(a.url("/f.bin"), mirrors: [b.url("/f.bin")], into: temp, connections: 4)
                        )
                        #expect(try await waitUntil { task.progress.bytesReceived > 2 << 20 })
                        return try await task.pause()
                    }
                    let decoded = try ResumeData(decoding: resumeData.encoded())
                    #expect(decoded.sources?.map(\.url) == [a.url("/f.bin"), b.url("/f.bin")])
                    #expect(decoded.maxConnectionsPerServer == nil)
                    let checksBefore = b.requests(for: "/f.bin").filter { $0.header("If-Range") == nil }.count

                    a.update("/f.bin") { $0.bytesPerSecond = 4 << 20 }
                    b.update("/f.bin") { $0.bytesPerSecond = 4 << 20 }
                    try await Downloader.withDownloader(
                        configuration: testConfiguration(store: temp.file("second.sqlite"))
                    ) { downloader in
                        let result = try await downloader.download(resumingFrom: decoded).result()
                        #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                        #expect(result.sources.count == 2 && result.sources.allSatisfy { $0.dropped == nil })
                    }
                    let checks = b.requests(for: "/f.bin").filter { $0.header("If-Range") == nil }.count
                    #expect(checks == checksBefore + 1, "the mirror is checked again, once")

                    // Hostile sources: another first URL, or a mirror that is not http(s).
                    var other = decoded
                    other.sources?[0].url = b.url("/f.bin")
                    #expect(throws: HaulError.self) { try ResumeData(decoding: other.encoded()) }
                    var scheme = decoded
                    scheme.sources?[1].url = URL(string: "file:///etc/passwd")!
                    #expect(throws: HaulError.self) { try ResumeData(decoding: scheme.encoded()) }
                }
            }
        }

        @Test("a mirror that fails once checked (503 on every segment) is dropped after its retries; the file is whole")
        func mirrorFailsMidway() async throws {
            try await TestServer.withServer { a in
                try await TestServer.withServer { b in
                    let temp = try TemporaryDirectory()
                    a.set("/f.bin", .init(size: 2 * MirrorTests.size, bytesPerSecond: 2 << 20))
                    // Its check is served; every ranged request after it is a 503. One connection
                    // per source, so its failures are in a row.
                    var failing = TestServer.Resource(
                        size: 2 * MirrorTests.size,
                        etag: .fixed("\"b\""),
                        failRanged: 1000
                    )
                    failing.passRanged = 1
                    b.set("/f.bin", failing)
                    try await Downloader.withDownloader(
                        configuration: testConfiguration(store: temp.file("haul.sqlite"))
                    ) { downloader in
                        var request = MirrorTests.request(
                            a.url("/f.bin"),
                            mirrors: [b.url("/f.bin")],
                            into: temp,
                            connections: 4
                        )
                        request.maxConnectionsPerServer = 1
                        let task = try await downloader.download(request)
                        let result = try await task.result()
                        #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                        let record = try await MirrorTests.task(downloader, task.id)
                        let reason = try #require(record.sources[1].dropped)
                        #expect(reason.contains("503") && reason.contains("after 5 retries"), "\(reason)")
                        #expect(record.sources[1].bytes == 0 && record.sources[1].verified)
                        #expect(record.sources.reduce(0) { $0 + $1.bytes } == Int64(2 * MirrorTests.size))
                        #expect(b.requests(for: "/f.bin").count == 1 + 6, "its check, then a segment asked 1 + 5 times")
                    }
                }
            }
        }

        @Test(
            "a mirror that cuts every response short (a reset loop): the file is whole; the mirror dropped after its retries"
        )
        func mirrorResetLoop() async throws {
            try await TestServer.withServer { a in
                try await TestServer.withServer { b in
                    let temp = try TemporaryDirectory()
                    a.set("/f.bin", .init(size: 2 * MirrorTests.size, bytesPerSecond: 4 << 20))
                    // Every answer of the mirror stops after 100 kB: each of its connections dies
                    // part-way, again and again.
                    b.set(
                        "/f.bin",
                        .init(
                            size: 2 * MirrorTests.size,
                            etag: .fixed("\"b\""),
                            cutAfter: 100_000,
                            faultyResponses: 10_000
                        )
                    )
                    try await Downloader.withDownloader(
                        configuration: testConfiguration(store: temp.file("haul.sqlite"))
                    ) { downloader in
                        let request = MirrorTests.request(
                            a.url("/f.bin"),
                            mirrors: [b.url("/f.bin")],
                            into: temp,
                            connections: 4
                        )
                        let task = try await downloader.download(request)
                        let result = try await task.result()
                        #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                        let record = try await MirrorTests.task(downloader, task.id)
                        #expect(record.sources.reduce(0) { $0 + $1.bytes } == Int64(2 * MirrorTests.size))
                        // What it wrote before each cut is kept (its bytes are the file's), the rest
                        // came from the URL. Dropped once a connection to it failed its retries in a
                        // row — unless the URL finished the file first (on a loaded machine it may).
                        if let reason = record.sources[1].dropped {
                            #expect(reason.contains("ended early") && reason.contains("after 5 retries"), "\(reason)")
                            #expect(
                                b.requests(for: "/f.bin").count >= 1 + 1 + 5,
                                "its check, then a segment asked 1 + 5 times"
                            )
                        } else {
                            #expect(b.requests(for: "/f.bin").count >= 2, "asked again after a cut")
                        }
                        #expect(record.sources[0].dropped == nil)
                    }
                }
            }
        }

        @Test("a rate limit holds for the file, whatever the number of sources")
        func rateLimitAcrossSources() async throws {
            try await MirrorTests.withServers { a, b, c in
                let temp = try TemporaryDirectory()
                for server in [a, b, c] { server.set("/f.bin", .init(size: 3 << 20)) }
                try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("haul.sqlite"))) {
                    downloader in
                    var request = MirrorTests.request(
                        a.url("/f.bin"),
                        mirrors: [b.url("/f.bin"), c.url("/f.bin")],
                        into: temp
                    )
                    request.rateLimit = 1 << 20
                    let started = ContinuousClock.now
                    let result = try await downloader.download(request).result()
                    #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                    // 3 MiB at 1 MiB/s with a bucket of a tenth of a second: never under 2.5 s,
                    // however fast the three servers are together.
                    #expect(ContinuousClock.now - started >= .milliseconds(2_500))
                    let record = try await MirrorTests.task(downloader, task: result.taskID)
                    #expect(record.sources.filter { $0.bytes > 0 }.count >= 2, "the limit is shared, not per source")
                }
            }
        }

        @Test("mirrors are checked as URLs: another scheme, a repeat, too many are refused before anything is recorded")
        func hostileMirrors() throws {
            let temp = try TemporaryDirectory()
            let url = URL(string: "http://127.0.0.1:1/f.bin")!
            func refused(_ mirrors: [URL]) -> String? {
                var request = DownloadRequest(url: url, destination: .directory(temp.path))
                request.mirrors = mirrors
                do {
                    try request.validate()
                    return nil
                } catch {
                    return "\(error)"
                }
            }
            #expect(refused([URL(string: "ftp://127.0.0.1/f.bin")!])?.contains("ftp") == true)
            #expect(
                refused([
                    URL(string: "http://u:secret@127.0.0.1:2/f.bin")!,
                    URL(string: "http://u:secret@127.0.0.1:2/f.bin")!,
                ])
                .map { $0.contains("given twice") && !$0.contains("secret") } == true
            )
            #expect(
                refused((2...17).map { URL(string: "http://127.0.0.1:\($0)/f.bin")! })?.contains("at most 15 mirrors")
                    == true
            )
            #expect(refused([URL(string: "http://127.0.0.1:2/f.bin")!]) == nil)
        }
    }
}
