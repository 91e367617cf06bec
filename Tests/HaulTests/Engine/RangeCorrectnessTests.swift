import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// One test per correctness rule of docs/architecture.md, each checking the final file's SHA-256 or
/// the exact error, and the exact headers the server saw.
@Suite("Range correctness rules", .timeLimit(.minutes(10)))
struct RangeCorrectnessTests {
    static let size = 3 << 20

    @Test("fresh download: identity encoding, Haul user agent, no Range")
    func freshDownload() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(result.path == temp.file("f.bin"))
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(!FileManager.default.fileExists(atPath: result.path + ".part"))
            let request = try #require(server.requests(for: "/f.bin").first)
            #expect(request.header("Accept-Encoding") == "identity")
            #expect(request.header("User-Agent") == "Haul/\(HaulVersion.current)")
            #expect(request.header("Range") == nil)
            #expect(request.header("If-Range") == nil)
            #expect(server.requests(for: "/f.bin").count == 1)
        }
    }

    @Test("rules 1, 3: a cut connection resumes with bytes=N- and If-Range: the strong ETag")
    func resumesWithStrongETag() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, cutAfter: 1_000_000, faultyResponses: 1))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let requests = server.requests(for: "/f.bin")
            #expect(requests.count == 2)
            let range = try #require(requests.last?.header("Range"))
            let start = try #require(Int(range.dropFirst("bytes=".count).dropLast()))
            #expect(range.hasSuffix("-") && start > 0 && start <= 1_000_000)
            #expect(requests.last?.header("If-Range") == "\"v1-1\"")
            #expect(result.bytesFetched < Int64(Self.size) + 1_000_000)
        }
    }

    @Test("rule 3: a weak ETag is never sent; a strong Last-Modified is")
    func weakETagFallsBackToLastModified() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, etag: .weak, cutAfter: 1_000_000, faultyResponses: 1))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let resume = try #require(server.requests(for: "/f.bin").last)
            #expect(resume.header("If-Range") == "Sun, 13 Sep 2020 12:26:40 GMT")
            #expect(resume.header("Range")?.hasPrefix("bytes=") == true)
        }
    }

    @Test("rule 7: no validator at all: resume re-reads a 64 KiB overlap before the resume point")
    func overlapWithoutValidators() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, etag: .none, lastModified: nil))
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: 1 << 20,
                validators: Validators(totalLength: Int64(Self.size))
            )
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let requests = server.requests(for: "/f.bin")
            #expect(requests.map { $0.header("Range") } == ["bytes=\((1 << 20) - Int(TransferRules.overlapLength))-"])
            #expect(requests.first?.header("If-Range") == nil)
            #expect(result.resumedFrom == 1 << 20)
            #expect(result.bytesFetched == Int64(Self.size - (1 << 20)))
        }
    }

    @Test("rules 5, 7: no validator and a 200 answer: the body is written from 0 on that response, not compared")
    func overlapRequestAnsweredWithWholeFile() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, etag: .none, lastModified: nil, ranges: false))
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: 1 << 20,
                validators: Validators(totalLength: Int64(Self.size)),
                partBytes: [UInt8](repeating: 0xEE, count: 1 << 20)
            )
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(server.requests(for: "/f.bin").count == 1)
        }
    }

    @Test("rule 7: a cut connection without validators resumes through the overlap check")
    func cutWithoutValidators() async throws {
        try await withHarness { server, downloader, temp in
            server.set(
                "/f.bin",
                .init(size: Self.size, etag: .none, lastModified: nil, cutAfter: 1_500_000, faultyResponses: 1)
            )
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let requests = server.requests(for: "/f.bin")
            #expect(requests.count == 2)
            #expect(requests.last?.header("If-Range") == nil)
            #expect(requests.last?.header("Range") != nil)
        }
    }

    @Test("rule 7: overlap mismatch (file changed, no validator) restarts from 0 and never mixes versions")
    func overlapMismatchRestarts() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, etag: .none, lastModified: nil))
            let old = server.content("/f.bin")
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: 1 << 20,
                validators: Validators(totalLength: Int64(Self.size))
            )
            server.bumpVersion("/f.bin")
            #expect(server.content("/f.bin") != old)
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let requests = server.requests(for: "/f.bin")
            #expect(requests.map { $0.header("Range") } == ["bytes=\((1 << 20) - 65536)-", nil])
        }
    }

    @Test("rules 3, 5: the file changed during a pause; If-Range fails, the 200 is written from 0 on the same response")
    func changedFileDuringPause() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, bytesPerSecond: 4 << 20))
            let task = try await downloader.download(
                DownloadRequest(url: server.url("/f.bin"), destination: .directory(temp.path))
            )
            #expect(try await waitUntil { task.progress.bytesReceived > 400_000 })
            let resumeData = try await task.pause()
            #expect(resumeData.bytesCommitted > 0)
            server.bumpVersion("/f.bin")
            server.update("/f.bin") { $0.bytesPerSecond = nil }
            let before = server.requests(for: "/f.bin").count
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let resumes = server.requests(for: "/f.bin").dropFirst(before)
            #expect(resumes.count == 1, "a 200 must be used as is, without a new request")
            #expect(resumes.first?.header("If-Range") == "\"v1-1\"")
            #expect(resumes.first?.header("Range") == resumeRange(from: resumeData.bytesCommitted))
        }
    }

    @Test("rule 5: a server without range support answers 200; the body replaces the partial data")
    func serverIgnoringRanges() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, ranges: false, cutAfter: 1_000_000, faultyResponses: 1))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(server.requests(for: "/f.bin").count == 2)
            #expect(server.requests(for: "/f.bin").last?.header("Range") != nil)
            #expect(result.bytes == Int64(Self.size))
        }
    }

    @Test(
        "rule 4: a 206 that is not exactly the range asked for restarts from 0",
        arguments: [TestServer.ContentRangeFault.shiftedStart(1), .shiftedStart(-100), .wrongTotal(1), .malformed]
    )
    func badContentRangeRestarts(fault: TestServer.ContentRangeFault) async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, contentRangeFault: fault))
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: 1 << 20,
                validators: Validators(etag: "\"v1-1\"", totalLength: Int64(Self.size))
            )
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(server.requests(for: "/f.bin").map { $0.header("Range") } == [resumeRange(from: 1 << 20), nil])
        }
    }

    @Test("rule 4: a 206 for a file of another length restarts from 0")
    func totalLengthChanged() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size))
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: 1 << 20,
                validators: Validators(etag: "\"v1-1\"", totalLength: Int64(Self.size) + 10)
            )
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(server.requests(for: "/f.bin").count == 2)
        }
    }

    @Test("rule 6: every byte on disk: the last 64 KiB are compared and nothing more is fetched")
    func satisfiedRangeCompletes() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size))
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: Self.size,
                validators: Validators(etag: "\"v1-1\"", totalLength: Int64(Self.size))
            )
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(server.requests(for: "/f.bin").map { $0.header("Range") } == [resumeRange(from: Int64(Self.size))])
            #expect(result.bytesFetched == 0)
        }
    }

    @Test("rule 6: 416 for a file that shrank restarts from 0")
    func unsatisfiableRangeRestarts() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 1 << 20, etag: .none))
            let longer = TestContent.bytes(count: 2 << 20, seed: 9)
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: 2 << 20,
                validators: Validators(
                    lastModified: "Sun, 13 Sep 2020 12:26:40 GMT",
                    date: "Mon, 14 Sep 2020 00:00:00 GMT",
                    totalLength: 2 << 20
                ),
                partBytes: longer
            )
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(result.bytes == 1 << 20)
            #expect(server.requests(for: "/f.bin").map { $0.header("Range") } == [resumeRange(from: 2 << 20), nil])
        }
    }

    @Test("rule 8: a body shorter than its Content-Length is retried, never a finished file")
    func shortBodyIsRetried() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, faultyResponses: 2, lengthLie: .short(5000)))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(server.requests(for: "/f.bin").count == 3)
        }
    }

    @Test("rule 8: a short body with no retries left fails and places nothing")
    func shortBodyWithoutRetriesFails() async throws {
        try await withHarness(retries: 0) { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, lengthLie: .short(5000)))
            let error = await expectHaulError(.connection) {
                _ = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            }
            #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin")))
            #expect(error?.resumeData != nil, "the bytes so far are kept for a resume")
        }
    }

    @Test("rule 8: a body longer than promised is an error and places nothing")
    func longBodyFails() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, lengthLie: .long(1000)))
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: 1 << 20,
                validators: Validators(etag: "\"v1-1\"", totalLength: Int64(Self.size))
            )
            let error = await expectHaulError(.invalidResponse) {
                _ = try await downloader.download(resumingFrom: resumeData).result()
            }
            #expect(error?.description.contains("more bytes than it promised") == true)
            #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin")))
        }
    }

    @Test("a chunked body of unknown length completes and is resumable")
    func chunkedBody() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, chunked: true))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(result.bytes == Int64(Self.size))
        }
    }

    @Test("rule 9: a checksum mismatch fails and leaves nothing at the destination or beside it")
    func checksumMismatch() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size))
            let wrong = try Checksum(parsing: "sha256=" + String(repeating: "0", count: 64))
            let error = await expectHaulError(.checksumMismatch) {
                _ = try await fetch(server, "/f.bin", with: downloader, into: temp.path, checksum: wrong)
            }
            #expect(error?.description.contains(server.sha256("/f.bin")) == true)
            #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin")))
            #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin.part")))
        }
    }

    @Test("rule 9: every supported checksum algorithm verifies", arguments: ["sha256", "sha512", "sha1", "md5"])
    func checksumMatches(algorithm: String) async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 100_000))
            let digest = try Self.digest(algorithm, server.content("/f.bin"))
            let result = try await fetch(
                server,
                "/f.bin",
                with: downloader,
                into: temp.path,
                checksum: try Checksum(parsing: "\(algorithm)=\(digest)")
            )
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
        }
    }

    /// The digest as coreutils computes it, so the check does not trust Haul's own hashing.
    static func digest(_ algorithm: String, _ bytes: [UInt8]) throws -> String {
        let temp = try TemporaryDirectory()
        let file = temp.file("content")
        _ = FileManager.default.createFile(atPath: file, contents: Data(bytes))
        let process = try ChildProcess(
            "/usr/bin/env",
            arguments: ["\(algorithm)sum", file],
            standardOutput: .file(temp.file("sum"))
        )
        process.waitUntilExit()
        let output = FileManager.default.contents(atPath: temp.file("sum")) ?? Data()
        return String(decoding: output, as: UTF8.self).split(separator: " ").first.map(String.init) ?? ""
    }
}
