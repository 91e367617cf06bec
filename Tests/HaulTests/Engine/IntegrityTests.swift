import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// The ways a wrong file was once called done: weak validators that changed, a 416 from a
/// file that shrank, and a body of unknown length cut by a clean close. Each test checks the
/// final file's SHA-256 against exactly one version and the requests the server saw.
@Suite("Integrity: never a wrong file called done", .timeLimit(.minutes(10)))
struct IntegrityTests {
    static let size = 3 << 20
    static let committed = 1 << 20
    /// A second of the server's clock the tests use as "just modified".
    static let recent = Date(timeIntervalSince1970: 1_700_000_000)
    /// What a new version changes: bytes well before the resume point and after it, so a
    /// mixed file (old head, new tail) matches neither version, and none in the overlap.
    static let headAndTail = [0..<(512 << 10), (2 << 20)..<size]

    /// Resume data for a part file holding the first `committed` bytes of version 1, with the
    /// validators a first response gave.
    func seed(_ server: TestServer, _ temp: TemporaryDirectory, validators: Validators) throws -> ResumeData {
        try seedPartial(
            server,
            "/f.bin",
            into: temp.path,
            name: "f.bin",
            committed: Self.committed,
            validators: validators
        )
    }

    @Test("a weak ETag that changed between runs restarts from 0, even when the bytes at the resume point match")
    func weakETagChanged() async throws {
        try await withHarness { server, downloader, temp in
            // Version 2 differs only after the resume point: the overlap alone cannot see it.
            server.set(
                "/f.bin",
                .init(size: Self.size, etag: .weak, lastModified: Self.recent, changedBytes: Self.headAndTail)
            )
            let resumeData = try seed(
                server,
                temp,
                validators: Validators(
                    etag: "W/\"v1-1\"",
                    lastModified: HTTPDate.format(Self.recent),
                    date: HTTPDate.format(Self.recent),
                    totalLength: Int64(Self.size)
                )
            )
            let old = server.content("/f.bin")
            server.bumpVersion("/f.bin")
            let new = server.content("/f.bin")
            #expect(old[(960 << 10)..<(2 << 20)] == new[(960 << 10)..<(2 << 20)])
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == TestContent.sha256(new))
            let requests = server.requests(for: "/f.bin")
            // The resume (no If-Range: nothing strong to send), then the restart from 0.
            #expect(requests.map { $0.header("Range") } == ["bytes=\(Self.committed - 65536)-", nil])
            #expect(requests.allSatisfy { $0.header("If-Range") == nil })
        }
    }

    @Test("only a recent (weak) Last-Modified, and it changed: restart from 0")
    func weakLastModifiedChanged() async throws {
        try await withHarness { server, downloader, temp in
            server.set(
                "/f.bin",
                .init(size: Self.size, etag: .none, lastModified: Self.recent, changedBytes: Self.headAndTail)
            )
            let resumeData = try seed(
                server,
                temp,
                validators: Validators(
                    lastModified: HTTPDate.format(Self.recent),
                    date: HTTPDate.format(Self.recent),
                    totalLength: Int64(Self.size)
                )
            )
            server.bumpVersion("/f.bin")
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(
                server.requests(for: "/f.bin").map { $0.header("Range") } == ["bytes=\(Self.committed - 65536)-", nil]
            )
        }
    }

    @Test("a weak ETag that became the same strong one (Apache, a second later) is the same file: ranged resume")
    func weakETagBecameStrong() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, etag: .strong, lastModified: Self.recent))
            let resumeData = try seed(
                server,
                temp,
                validators: Validators(
                    etag: "W/\"v1-1\"",
                    lastModified: HTTPDate.format(Self.recent),
                    date: HTTPDate.format(Self.recent),
                    totalLength: Int64(Self.size)
                )
            )
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(server.requests(for: "/f.bin").map { $0.header("Range") } == ["bytes=\(Self.committed - 65536)-"])
            #expect(result.bytesFetched == Int64(Self.size - Self.committed))
        }
    }

    @Test(
        "a 416 from a file that shrank below the committed offset starts over",
        arguments: [IntegrityTests.committed, IntegrityTests.size]
    )
    func shrankBelowCommitted(committed: Int) async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size))
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: committed,
                validators: Validators(etag: "\"v1-1\"", totalLength: Int64(Self.size))
            )
            // Same ETag (a hostile or careless server), a shorter file.
            server.update("/f.bin") { $0.size = Self.committed / 2 }
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(result.bytes == Int64(Self.committed / 2))
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            let requests = server.requests(for: "/f.bin")
            #expect(requests.map { $0.header("Range") } == [resumeRange(from: Int64(committed)), nil])
        }
    }

    @Test("a 416 naming the committed length but not the stored total is not complete")
    func fourSixteenForAnotherLength() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.committed))
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: Self.committed,
                validators: Validators(etag: "\"v1-1\"", totalLength: Int64(Self.size))
            )
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(result.bytes == Int64(Self.committed))
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(server.requests(for: "/f.bin").count == 2)
        }
    }

    @Test("HTTP/1.0 without Content-Length cut by a clean close: the end is checked and the rest fetched")
    func closeDelimitedCut() async throws {
        try await withHarness { server, downloader, temp in
            server.set(
                "/f.bin",
                .init(size: Self.size, cutAfter: 1_500_000, faultyResponses: 1, closeDelimited: true)
            )
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(Bool(true))
            let requests = server.requests(for: "/f.bin")
            #expect(requests.map { $0.header("Range") } == [nil, resumeRange(from: 1_500_000)])
            #expect(requests.last?.header("If-Range") == "\"v1-1\"")
        }
    }

    @Test("HTTP/1.0 without Content-Length, whole: a 206 ending where the body ended confirms it")
    func closeDelimitedConfirmedBy416() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, closeDelimited: true))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(Bool(true))
            #expect(
                server.requests(for: "/f.bin").map { $0.header("Range") } == [nil, resumeRange(from: Int64(Self.size))]
            )
            #expect(server.requests(for: "/f.bin").last?.header("If-Range") == "\"v1-1\"")
            let info = try await downloader.store.task(id: result.taskID)
            #expect(info?.totalLength == Int64(Self.size))
        }
    }

    @Test("HTTP/1.0 without Content-Length or validators: the overlap before the end confirms it")
    func closeDelimitedConfirmedByOverlap() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, etag: .none, lastModified: nil, closeDelimited: true))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(Bool(true))
            #expect(
                server.requests(for: "/f.bin").map { $0.header("Range") } == [nil, "bytes=\(Self.size - 65536)-"]
            )
        }
    }

    @Test("HTTP/1.0 without Content-Length and without ranges: finished, but the result says the end is unconfirmed")
    func closeDelimitedUnconfirmed() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size, ranges: false, closeDelimited: true))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(Bool(true))
            #expect(server.requests(for: "/f.bin").count == 2)

        }
    }
}
