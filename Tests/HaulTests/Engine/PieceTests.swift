import Foundation
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// Piece hashes (a Metalink's `<pieces>`): each piece checked as it completes, a bad one
/// fetched again from another source, a source dropped after two bad pieces, and the
/// verified pieces kept across a pause — checked by the file's hash and by the requests
/// each server saw.
@Suite("Piece hashes", .timeLimit(.minutes(10)))
struct PieceTests {
    static let size = 8 << 20

    static func request(
        _ url: URL,
        mirrors: [URL] = [],
        hashes: PieceHashes,
        into temp: TemporaryDirectory
    )
        -> DownloadRequest
    {
        var request = DownloadRequest(
            url: url,
            destination: .directory(temp.path),
            connections: 2,
            minSplitSize: 256 << 10
        )
        request.mirrors = mirrors
        request.maxConnectionsPerServer = 1
        request.pieceHashes = hashes
        return request
    }

    /// One bit per piece.
    static func verifiedCount(_ bitmap: [UInt8]?) -> Int {
        bitmap?.reduce(0) { $0 + $1.nonzeroBitCount } ?? 0
    }

    @Test("a mirror corrupting pieces: each bad piece is fetched again from the URL, the mirror dropped after two")
    func corruptingMirror() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                // The URL opens the download and writes the first half; the mirror, checked
                // against the URL's bytes there, takes the second half, where one byte of
                // every piece is damaged.
                a.set("/f.bin", .init(size: Self.size, etag: .fixed("\"a\""), bytesPerSecond: 4 << 20))
                let damaged = (16..<32).map { $0 * Fixtures.pieceLength + 1000..<$0 * Fixtures.pieceLength + 1001 }
                b.set("/f.bin", .init(size: Self.size, etag: .fixed("\"b\""), corrupted: damaged))
                let hashes = try Fixtures.pieceHashes(of: a.content("/f.bin"))
                try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("h.sqlite"))) {
                    downloader in
                    let task = try await downloader.download(
                        Self.request(a.url("/f.bin"), mirrors: [b.url("/f.bin")], hashes: hashes, into: temp)
                    )
                    let result = try await task.result()
                    #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                    #expect(result.piecesRefetched >= 2, "\(result.piecesRefetched)")
                    // Every piece checked, and each fetched again checked again.
                    #expect(result.piecesChecked >= 32 + result.piecesRefetched, "\(result.piecesChecked)")
                    let dropped = try #require(result.sources[1].dropped)
                    #expect(dropped == "2 of its pieces did not match their sha256 hashes")
                    #expect(result.sources[0].dropped == nil)
                    // The pieces fetched again: exactly a piece's bytes each, from the URL.
                    let pieceRanges = a.requests(for: "/f.bin").compactMap(Fixtures.range).filter {
                        $0.first % Fixtures.pieceLength == 0 && $0.last == $0.first + Fixtures.pieceLength - 1
                            && $0.first >= 16 * Fixtures.pieceLength
                    }
                    #expect(pieceRanges.count == result.piecesRefetched)
                    #expect(b.requests(for: "/f.bin").count >= 2, "the mirror was checked, then served a segment")
                }
            }
        }
    }

    @Test("the only source serving a bad piece: asked again once, then the download fails with a checksum error")
    func onlySourceBad() async throws {
        try await TestServer.withServer { a in
            let temp = try TemporaryDirectory()
            let good = TestContent.bytes(count: Self.size, seed: 1)
            let damaged = [
                5 * Fixtures.pieceLength..<5 * Fixtures.pieceLength + 1,
                9 * Fixtures.pieceLength..<9 * Fixtures.pieceLength + 1,
            ]
            a.set("/f.bin", .init(size: Self.size, corrupted: damaged))
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("h.sqlite"))) {
                downloader in
                let task = try await downloader.download(
                    Self.request(a.url("/f.bin"), hashes: try Fixtures.pieceHashes(of: good), into: temp)
                )
                let error = try await #require(throws: HaulError.self) { try await task.result() }
                #expect(error.code == .checksumMismatch)
                #expect(error.message.contains("do not match their sha256 hashes"), "\(error.message)")
                #expect(error.message.contains("no other source is left"), "\(error.message)")
                #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin")), "nothing placed")
            }
        }
    }

    /// Downloads `/f.bin` (8 MiB at 1 MiB/s per connection) with its piece hashes until more
    /// than `bytes` arrived, pauses it, lets the server go at full speed, then runs `body`
    /// with the downloader, the request (adding it again resumes it) and the paused task.
    static func pausedDownload(
        after bytes: Int,
        connections: Int = 2,
        _ body: (TestServer, Downloader, DownloadRequest, UUID) async throws -> Void
    ) async throws {
        try await TestServer.withServer { a in
            let temp = try TemporaryDirectory()
            a.set("/f.bin", .init(size: Self.size, bytesPerSecond: 1 << 20))
            let hashes = try Fixtures.pieceHashes(of: a.content("/f.bin"))
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("h.sqlite"))) {
                downloader in
                var request = Self.request(a.url("/f.bin"), hashes: hashes, into: temp)
                request.connections = connections
                let task = try await downloader.download(request)
                #expect(try await waitUntil { task.progress.bytesReceived > bytes })
                _ = try await task.pause()
                a.update("/f.bin") { $0.bytesPerSecond = nil }
                try await body(a, downloader, request, task.id)
            }
        }
    }

    @Test("pause and resume: the pieces verified before are not checked again; the file is right")
    func resumeKeepsVerifiedPieces() async throws {
        try await Self.pausedDownload(after: 3 << 20) { a, downloader, request, id in
            let stored = try #require(try await downloader.store.pieces(of: id))
            let before = Self.verifiedCount(stored.verified)
            #expect(before >= 4, "pieces verified while it ran are recorded with the checkpoints: \(before)")
            let result = try await downloader.download(request).result()
            #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
            #expect(result.piecesChecked == 32 - before, "only the pieces not verified before")
            #expect(result.piecesRefetched == 0)
        }
    }

    @Test("one connection resumed with piece hashes asks from its committed offset: no overlap (rule 7a)")
    func singleStreamResumeWithoutOverlap() async throws {
        try await Self.pausedDownload(after: 3 << 20, connections: 1) { a, downloader, request, id in
            let segments = try await downloader.store.segments(of: id)
            #expect(segments.count == 1)
            let committed = try #require(segments.first?.committed)
            #expect(committed > 0)
            let before = a.requests(for: "/f.bin").count
            let result = try await downloader.download(request).result()
            #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
            let resumed = a.requests(for: "/f.bin").dropFirst(before).map { $0.header("Range") }
            #expect(resumed == ["bytes=\(committed)-"])
        }
    }

    @Test(
        "resume data carries the piece hashes: resumed in another store, every piece is checked there; bad ones are refused"
    )
    func resumeDataCarriesPieces() async throws {
        try await TestServer.withServer { a in
            let temp = try TemporaryDirectory()
            a.set("/f.bin", .init(size: Self.size, bytesPerSecond: 1 << 20))
            let hashes = try Fixtures.pieceHashes(of: a.content("/f.bin"))
            let resumeData = try await Downloader.withDownloader(
                configuration: testConfiguration(store: temp.file("first.sqlite"))
            ) { downloader in
                let task = try await downloader.download(Self.request(a.url("/f.bin"), hashes: hashes, into: temp))
                #expect(try await waitUntil { task.progress.bytesReceived > 3 << 20 })
                return try await task.pause()
            }
            let decoded = try ResumeData(decoding: resumeData.encoded())
            #expect(decoded.pieces == hashes)

            a.update("/f.bin") { $0.bytesPerSecond = nil }
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("second.sqlite"))) {
                downloader in
                let result = try await downloader.download(resumingFrom: decoded).result()
                #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
                // What the first store verified is not taken on trust: all 32 are checked here.
                #expect(result.piecesChecked == 32)
                #expect(try await downloader.store.pieces(of: decoded.taskID)?.hashes == hashes)
            }

            // Hostile piece hashes: a digest cut short, an unknown algorithm.
            var json = try #require(String(data: decoded.encoded(), encoding: .utf8))
            let first = hashes.hex(0)
            json = json.replacingOccurrences(of: "\"\(first)\"", with: "\"\(first.dropLast(2))\"")
            let short = await expectHaulError(.corruptResumeData) { _ = try ResumeData(decoding: Data(json.utf8)) }
            #expect(short?.description.contains("Resume data is corrupt") == true)
            let unknown = try #require(String(data: decoded.encoded(), encoding: .utf8))
                .replacingOccurrences(of: "\"algorithm\":\"sha256\"", with: "\"algorithm\":\"crc32\"")
            #expect(unknown.contains("crc32"))
            _ = await expectHaulError(.corruptResumeData) { _ = try ResumeData(decoding: Data(unknown.utf8)) }
        }
    }

    @Test("a store's bitmap of the wrong size counts as nothing verified: every piece is checked again")
    func hostileBitmap() async throws {
        try await Self.pausedDownload(after: 2 << 20) { a, downloader, request, _ in
            try await #require(downloader.store as? Store).write { db in
                try db.execute(sql: "UPDATE piece SET verified = x'FFFFFFFFFFFFFFFFFF'")
            }
            let result = try await downloader.download(request).result()
            #expect(TestContent.sha256(file: result.path) == a.sha256("/f.bin"))
            #expect(result.piecesChecked == 32)

            // Digests that are not digests: the task cannot be read, in one sentence.
            try await #require(downloader.store as? Store).write { db in
                try db.execute(sql: "UPDATE piece SET digests = x'0102', verified = NULL")
            }
            var again = request
            again.overwrite = true
            let error = try await #require(throws: HaulError.self) {
                try await downloader.download(again).result()
            }
            #expect(error.message.contains("its piece hashes are not piece hashes"), "\(error.message)")
        }
    }

    @Test("piece hashes for another length: the download fails at once naming both, and fetches no more")
    func hashesForAnotherLength() async throws {
        try await TestServer.withServer { a in
            let temp = try TemporaryDirectory()
            a.set("/f.bin", .init(size: 4 << 20))
            let hashes = try Fixtures.pieceHashes(of: TestContent.bytes(count: Self.size, seed: 1))
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("h.sqlite"))) {
                downloader in
                let task = try await downloader.download(Self.request(a.url("/f.bin"), hashes: hashes, into: temp))
                let error = try await #require(throws: HaulError.self) { try await task.result() }
                #expect(error.code == .checksumMismatch)
                #expect(
                    error.message.contains("its 32 piece hashes of 262144 bytes do not fit a file of 4194304 bytes"),
                    "\(error.message)"
                )
            }
        }
    }

    @Test("piece hashes are checked as given: a length, a count or a digest out of bounds is refused")
    func hostileHashes() throws {
        let hex = String(repeating: "ab", count: 32)
        #expect(throws: HaulError.self) { try PieceHashes(algorithm: .sha256, length: 512, hexDigests: [hex]) }
        #expect(throws: HaulError.self) { try PieceHashes(algorithm: .sha256, length: 1 << 20, hexDigests: []) }
        #expect(throws: HaulError.self) { try PieceHashes(algorithm: .sha256, length: 1 << 20, hexDigests: ["xy"]) }
        #expect(throws: HaulError.self) {
            try PieceHashes(algorithm: .sha1, length: 1 << 20, hexDigests: [hex])  // 64 digits for SHA-1
        }
        let hashes = try PieceHashes(algorithm: .sha256, length: 1 << 20, hexDigests: [hex, hex.uppercased()])
        #expect(hashes.count == 2 && hashes.hex(1) == hex)
        #expect(hashes.problem(forLength: 2 << 20) == nil)
        #expect(hashes.problem(forLength: (2 << 20) + 1) != nil)
        #expect(hashes.pieces(overlapping: (1 << 20) - 1..<(1 << 20) + 1) == 0..<2)

        // The API's form: each fault is one sentence saying what is wrong.
        let wire = API.AddRequest.Download.Pieces(hashes)
        var unknown = wire
        unknown.algorithm = "crc32"
        let unknownError = #expect(throws: HaulError.self) { try unknown.pieceHashes() }
        #expect(unknownError?.message == "Unknown piece hash algorithm 'crc32'")
        var short = wire
        short.hashes[1] = "ab"
        let shortError = #expect(throws: HaulError.self) { try short.pieceHashes() }
        #expect(shortError?.message == "Piece hash 1 is not 64 hex digits of sha256")
        #expect(try wire.pieceHashes() == hashes)
    }
}
