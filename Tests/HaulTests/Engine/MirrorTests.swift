import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// One file from several sources (`--mirror`): spread over all of them, each mirror's bytes
/// compared with another source's before it takes a segment, a failing or different one
/// dropped, checked byte for byte and by the requests each server saw.
@Suite("Mirrors", .timeLimit(.minutes(10)))
struct MirrorTests {
    static let size = 6 << 20

    /// Three servers, started and stopped together.
    static func withServers(_ body: (TestServer, TestServer, TestServer) async throws -> Void) async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                try await TestServer.withServer { c in try await body(a, b, c) }
            }
        }
    }

    static func request(
        _ primary: URL,
        mirrors: [URL],
        into temp: TemporaryDirectory,
        connections: Int = 6
    ) -> DownloadRequest {
        var request = DownloadRequest(
            url: primary,
            destination: .directory(temp.path),
            connections: connections,
            minSplitSize: 256 << 10
        )
        request.mirrors = mirrors
        return request
    }

    /// The ranged requests a server saw for `path`, as (first, last) bytes.
    static func ranges(_ server: TestServer, _ path: String) -> [(first: Int, last: Int?)] {
        server.requests(for: path).compactMap(Fixtures.range)
    }

    static func task(_ downloader: Downloader, _ id: UUID) async throws -> TaskRecord {
        try #require(try await downloader.store.task(id: id))
    }

    static func task(_ downloader: Downloader, task id: UUID) async throws -> TaskRecord {
        try await task(downloader, id)
    }

    @Test("three sources of different speeds: the file is whole, each served bytes, each mirror checked first")
    func threeSources() async throws {
        try await Self.withServers { a, b, c in
            let temp = try TemporaryDirectory()
            // The primary holds every response past its first 256 KiB (a window to check the
            // mirrors with) until each mirror has served a segment: alone, it could finish the
            // file before a loaded machine had checked the slowest mirror.
            a.set("/f.bin", .init(size: Self.size, etag: .fixed("\"a-1\""), bytesPerSecond: 4 << 20, holdAt: 256 << 10))
            b.set("/f.bin", .init(size: Self.size, etag: .fixed("\"b-1\""), bytesPerSecond: 8 << 20))
            c.set("/f.bin", .init(size: Self.size, etag: .fixed("\"c-1\""), bytesPerSecond: 2 << 20))
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("haul.sqlite"))) {
                downloader in
                let task = try await downloader.download(
                    Self.request(a.url("/f.bin"), mirrors: [b.url("/f.bin"), c.url("/f.bin")], into: temp)
                )
                #expect(try await waitUntil { [b, c].allSatisfy { $0.requests(for: "/f.bin").count > 1 } })
                a.release("/f.bin")
                let result = try await task.result()
                #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                #expect(result.bytes == Int64(Self.size))

                for (server, etag) in [(b, "\"b-1\""), (c, "\"c-1\"")] {
                    let requests = server.requests(for: "/f.bin")
                    // Its first request is the comparison: 64 KiB, without If-Range.
                    let first = try #require(requests.first)
                    let range = try #require(Fixtures.range(first))
                    #expect(range.last.map { $0 - range.first + 1 } == 64 << 10)
                    #expect(first.header("If-Range") == nil)
                    // Every later one is a segment, conditional on this mirror's own ETag.
                    #expect(requests.count > 1, "the mirror served segments")
                    for request in requests.dropFirst() { #expect(request.header("If-Range") == etag) }
                }
                for request in a.requests(for: "/f.bin").dropFirst() {
                    #expect(request.header("If-Range") == "\"a-1\"")
                }

                let record = try await Self.task(downloader, task.id)
                #expect(record.sources.map(\.url) == [a, b, c].map { $0.url("/f.bin") })
                #expect(record.sources.allSatisfy { $0.dropped == nil && $0.verified && $0.bytes > 0 })
                #expect(record.sources.reduce(0) { $0 + $1.bytes } == Int64(Self.size), "no byte counted twice")
                #expect(record.sources[1].validators?.etag == "\"b-1\"")
            }
        }
    }

    @Test("a mirror that refuses connections and one that answers 404 are dropped with their reasons")
    func failingMirrorsAreDropped() async throws {
        try await Self.withServers { a, b, _ in
            let temp = try TemporaryDirectory()
            // Slow enough that the refused mirror's retries (10–50 ms apart here) run out first.
            a.set("/f.bin", .init(size: Self.size, bytesPerSecond: 1 << 20))
            let refusing = try RefusingPort()
            defer { withExtendedLifetime(refusing) {} }
            let closed = URL(string: "http://127.0.0.1:\(refusing.port)/f.bin")!
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("haul.sqlite"))) {
                downloader in
                let task = try await downloader.download(
                    Self.request(a.url("/f.bin"), mirrors: [closed, b.url("/missing.bin")], into: temp)
                )
                let result = try await task.result()
                #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                let record = try await Self.task(downloader, task.id)
                #expect(record.sources[0].dropped == nil)
                #expect(record.sources[0].bytes == Int64(Self.size))
                let refused = try #require(record.sources[1].dropped)
                #expect(refused.contains("refused"), "\(refused)")
                let missing = try #require(record.sources[2].dropped)
                #expect(missing.contains("404"), "\(missing)")
                #expect(record.sources[1].bytes == 0 && record.sources[2].bytes == 0)
                #expect(b.requests(for: "/missing.bin").count == 1, "a 404 is not asked again")
            }
        }
    }

    @Test("a mirror serving another file of the same length is outvoted and dropped; the file is the majority's")
    func differentFileIsOutvoted() async throws {
        try await Self.withServers { a, b, c in
            let temp = try TemporaryDirectory()
            a.set("/f.bin", .init(size: Self.size, seed: 7, bytesPerSecond: 4 << 20))
            b.set("/f.bin", .init(size: Self.size, seed: 7, bytesPerSecond: 4 << 20))
            c.set("/f.bin", .init(size: Self.size, seed: 8, bytesPerSecond: 8 << 20))
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("haul.sqlite"))) {
                downloader in
                let task = try await downloader.download(
                    Self.request(a.url("/f.bin"), mirrors: [b.url("/f.bin"), c.url("/f.bin")], into: temp)
                )
                let result = try await task.result()
                #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                let record = try await Self.task(downloader, task.id)
                let reason = try #require(record.sources[2].dropped)
                #expect(reason.contains("differ from the other sources'"), "\(reason)")
                #expect(record.sources[2].bytes == 0, "none of its bytes are in the file")
                #expect(record.sources[1].dropped == nil && record.sources[1].verified)
            }
        }
    }

    @Test("two sources that disagree: the download fails naming the mirror, and no file is placed")
    func evenSplitFails() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                a.set("/f.bin", .init(size: Self.size, seed: 7, bytesPerSecond: 4 << 20))
                b.set("/f.bin", .init(size: Self.size, seed: 8))
                try await Downloader.withDownloader(
                    configuration: testConfiguration(store: temp.file("haul.sqlite"))
                ) { downloader in
                    let task = try await downloader.download(
                        Self.request(a.url("/f.bin"), mirrors: [b.url("/f.bin")], into: temp)
                    )
                    let error = await #expect(throws: HaulError.self) { try await task.result() }
                    #expect(error?.code == .representationChanged)
                    #expect(
                        error?.message.contains(b.url("/f.bin").absoluteString) == true,
                        "\(String(describing: error))"
                    )
                    #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin")))
                }
            }
        }
    }

    @Test("a mirror whose file has another length is dropped, saying both lengths")
    func otherLengthIsDropped() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                a.set("/f.bin", .init(size: Self.size, bytesPerSecond: 8 << 20))
                b.set("/f.bin", .init(size: Self.size + 1))
                try await Downloader.withDownloader(
                    configuration: testConfiguration(store: temp.file("haul.sqlite"))
                ) { downloader in
                    let task = try await downloader.download(
                        Self.request(a.url("/f.bin"), mirrors: [b.url("/f.bin")], into: temp)
                    )
                    let result = try await task.result()
                    #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                    let record = try await Self.task(downloader, task.id)
                    #expect(
                        record.sources[1].dropped == "206 says the file is \(Self.size + 1) bytes, was \(Self.size)"
                    )
                    #expect(b.requests(for: "/f.bin").count == 1)
                }
            }
        }
    }

    @Test("the URL answers 404 at once: the first mirror opens the download, the others are checked against it")
    func urlGoneAtTheOpening() async throws {
        try await Self.withServers { a, b, c in
            let temp = try TemporaryDirectory()
            b.set("/f.bin", .init(size: Self.size, etag: .fixed("\"b-1\""), bytesPerSecond: 4 << 20))
            c.set("/f.bin", .init(size: Self.size, etag: .fixed("\"c-1\""), bytesPerSecond: 4 << 20))
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("haul.sqlite"))) {
                downloader in
                let task = try await downloader.download(
                    Self.request(a.url("/f.bin"), mirrors: [b.url("/f.bin"), c.url("/f.bin")], into: temp)
                )
                let result = try await task.result()
                #expect(TestContent.sha256(file: result.path) == b.sha256("/f.bin"))
                #expect(a.requests(for: "/f.bin").count == 1, "a 404 is not asked again")
                #expect(b.requests(for: "/f.bin").first?.header("Range") == nil, "the mirror opens with the whole file")
                let record = try await Self.task(downloader, task.id)
                #expect(record.sources[0].dropped?.contains("404") == true, "\(record.sources[0])")
                #expect(record.etag == "\"b-1\"", "the file's validators are the new lead's")
                #expect(record.sources[2].verified && record.sources[2].bytes > 0)
            }
        }
    }

    /// The download of a URL outvoted by its two mirrors completed with the mirrors' file:
    /// the URL dropped for the majority, both mirrors kept.
    static func expectMirrorsWon(_ task: DownloadTask, _ downloader: Downloader, mirror: TestServer) async throws {
        let result = try await task.result()
        #expect(TestContent.sha256(file: result.path) == mirror.sha256("/f.bin"))
        let record = try await Self.task(downloader, task.id)
        let reason = try #require(record.sources[0].dropped)
        #expect(reason.contains("majority"), "\(reason)")
        #expect(record.sources[1].dropped == nil && record.sources[2].dropped == nil)
    }

    @Test("two mirrors agree and the URL serves another file: the URL is outvoted, the file is the mirrors'")
    func urlOutvoted() async throws {
        try await Self.withServers { a, b, c in
            let temp = try TemporaryDirectory()
            a.set("/f.bin", .init(size: Self.size, seed: 8, bytesPerSecond: 2 << 20))
            b.set("/f.bin", .init(size: Self.size, seed: 7, etag: .fixed("\"b-1\""), bytesPerSecond: 4 << 20))
            c.set("/f.bin", .init(size: Self.size, seed: 7, etag: .fixed("\"c-1\""), bytesPerSecond: 4 << 20))
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("haul.sqlite"))) {
                downloader in
                let task = try await downloader.download(
                    Self.request(a.url("/f.bin"), mirrors: [b.url("/f.bin"), c.url("/f.bin")], into: temp)
                )
                try await Self.expectMirrorsWon(task, downloader, mirror: b)
            }
        }
    }

    @Test("both mirrors find the URL outvoted at once: the file starts over from them, it does not fail")
    func urlOutvotedTwiceAtOnce() async throws {
        try await Self.withServers { a, b, c in
            let temp = try TemporaryDirectory()
            a.set("/f.bin", .init(size: Self.size, seed: 8, bytesPerSecond: 2 << 20))
            // Each mirror's first answer (its own check) waits until both are asked: the two
            // checks then ask each other and count the same vote together.
            b.set("/f.bin", .init(size: Self.size, seed: 7, etag: .fixed("\"b-1\""), holdAt: 0))
            c.set("/f.bin", .init(size: Self.size, seed: 7, etag: .fixed("\"c-1\""), holdAt: 0))
            var configuration = testConfiguration(store: temp.file("haul.sqlite"))
            configuration.readTimeout = .seconds(3600)  // Held answers are silent on purpose.
            try await Downloader.withDownloader(configuration: configuration) { downloader in
                let task = try await downloader.download(
                    Self.request(a.url("/f.bin"), mirrors: [b.url("/f.bin"), c.url("/f.bin")], into: temp)
                )
                #expect(try await waitUntil(timeout: .seconds(60)) { b.heldResponses == 1 && c.heldResponses == 1 })
                b.release()
                c.release()
                try await Self.expectMirrorsWon(task, downloader, mirror: b)
            }
        }
    }
}
