import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// `haul get` killed with SIGKILL at chosen moments; the same command run again must finish
/// with the right bytes, continuing from the committed offset.
@Suite("Crash safety (kill -9)", .serialized, .tags(.process, .slow), .leftOutOfFastLoop, .timeLimit(.minutes(20)))
struct CrashSafetyTests {
    enum KillPoint: String, CaseIterable, Sendable {
        /// Before any checkpoint: nothing committed, the rerun starts from 0.
        case beforeFirstCheckpoint
        /// Right after a checkpoint reached the store.
        case rightAfterCheckpoint
        /// After bytes were written past the last checkpoint, before the next one.
        case betweenWriteAndCheckpoint
    }

    static let size = 24 << 20

    @Test(arguments: KillPoint.allCases)
    func killNineThenRerun(point: KillPoint) async throws {
        let temp = try TemporaryDirectory()
        let home = try temp.directory("home")
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            server.set("/big.bin", .init(size: Self.size, bytesPerSecond: 6 << 20))
            let arguments = [
                "get", "-q", "-x", "1", "-d", out, "--checkpoint-interval",
                point == .beforeFirstCheckpoint ? "10" : "0.25",
                server.url("/big.bin").absoluteString,
            ]
            let child = try HaulProcess(arguments, home: home)

            // Wait for the child to create its store before opening it here.
            #expect(try await waitUntil { server.bodyBytesSent("/big.bin") > 0 })
            let store = try Store(path: (home as NSString).appendingPathComponent("haul.sqlite"))
            func committed() async throws -> Int64 {
                guard let task = try await store.allTasks().first else { return 0 }
                return try await store.segments(of: task.id).first?.committed ?? 0
            }
            switch point {
            case .beforeFirstCheckpoint:
                #expect(try await waitUntil { server.bodyBytesSent("/big.bin") >= 256 << 10 })
            case .rightAfterCheckpoint:
                #expect(try await waitUntil { try await committed() > 0 })
            case .betweenWriteAndCheckpoint:
                let first = try await waitUntil { try await committed() > 0 }
                #expect(first)
                let mark = try await committed()
                #expect(try await waitUntil { server.bodyBytesSent("/big.bin") >= Int(mark) + (512 << 10) })
            }
            child.kill(SIGKILL)
            let killed = await child.finish()
            #expect(killed.status == SIGKILL)

            let atKill = try await committed()
            switch point {
            case .beforeFirstCheckpoint: #expect(atKill == 0)
            case .rightAfterCheckpoint, .betweenWriteAndCheckpoint: #expect(atKill > 0)
            }
            #expect(atKill < Int64(Self.size))
            #expect(!FileManager.default.fileExists(atPath: (out as NSString).appendingPathComponent("big.bin")))

            server.update("/big.bin") { $0.bytesPerSecond = nil }
            let requestsBefore = server.requests(for: "/big.bin").count
            let rerun = try await HaulProcess.run(arguments, home: home)
            #expect(rerun.status == 0, "\(rerun.stderr)")
            #expect(sha256(file: (out as NSString).appendingPathComponent("big.bin")) == server.sha256("/big.bin"))
            let resumed = server.requests(for: "/big.bin").dropFirst(requestsBefore)
            #expect(resumed.count == 1)
            if atKill > 0 {
                #expect(resumed.first?.header("Range") == resumeRange(from: atKill))
                #expect(resumed.first?.header("If-Range") == "\"v1-1\"")
            } else {
                #expect(resumed.first?.header("Range") == nil)
            }
        }
    }

    /// How far a segmented download gets before the kill.
    enum SegmentedKillPoint: String, CaseIterable, Sendable {
        /// Soon after the first checkpoint: most segments barely started.
        case early
        /// Several segments well under way, some bytes written past their checkpoints.
        case midway
    }

    @Test(
        "kill -9 during a segmented download: every segment resumes at its committed offset",
        arguments: SegmentedKillPoint.allCases
    )
    func killNineSegmented(point: SegmentedKillPoint) async throws {
        let temp = try TemporaryDirectory()
        let home = try temp.directory("home")
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            server.set("/big.bin", .init(size: Self.size, bytesPerSecond: 2 << 20))
            let arguments = [
                "get", "-q", "-x", "4", "--min-split", "1M", "-d", out, "--checkpoint-interval", "0.25",
                server.url("/big.bin").absoluteString,
            ]
            let child = try HaulProcess(arguments, home: home)
            #expect(try await waitUntil { server.bodyBytesSent("/big.bin") > 0 })
            let store = try Store(path: (home as NSString).appendingPathComponent("haul.sqlite"))
            func segments() async throws -> [SegmentRecord] {
                guard let task = try await store.allTasks().first else { return [] }
                return try await store.segments(of: task.id)
            }
            let started = { (segments: [SegmentRecord]) in segments.filter { $0.committed > $0.start }.count }
            switch point {
            case .early:
                #expect(try await waitUntil { try await started(segments()) >= 1 })
            case .midway:
                #expect(try await waitUntil { try await started(segments()) >= 3 })
                // Then more bytes on the way, some of them past the last checkpoint.
                let sent = server.bodyBytesSent("/big.bin")
                #expect(try await waitUntil { server.bodyBytesSent("/big.bin") >= sent + (1 << 20) })
            }
            child.kill(SIGKILL)
            #expect(await child.finish().status == SIGKILL)

            let atKill = try await segments()
            #expect(atKill.count == 4, "the split was recorded: \(atKill)")
            let unfinished = atKill.filter { $0.committed < $0.end! }
            #expect(!unfinished.isEmpty)
            #expect(!FileManager.default.fileExists(atPath: (out as NSString).appendingPathComponent("big.bin")))

            server.update("/big.bin") { $0.bytesPerSecond = nil }
            let requestsBefore = server.requests(for: "/big.bin").count
            let rerun = try await HaulProcess.run(arguments, home: home)
            #expect(rerun.status == 0, "\(rerun.stderr)")
            #expect(sha256(file: (out as NSString).appendingPathComponent("big.bin")) == server.sha256("/big.bin"))
            let resumed = server.requests(for: "/big.bin").dropFirst(requestsBefore)
            let starts = resumed.compactMap { request -> Int64? in
                guard let range = request.header("Range"), range.hasPrefix("bytes=") else { return nil }
                return Int64(range.dropFirst("bytes=".count).prefix { $0 != "-" })
            }
            #expect(starts.count == resumed.count, "every resumed request is ranged")
            for segment in unfinished {
                let overlap = min(segment.committed - segment.start, TransferRules.overlapLength)
                #expect(
                    starts.contains(segment.committed - overlap),
                    "segment at \(segment.start) resumed at \(segment.committed) less its overlap: \(starts)"
                )
            }
            #expect(resumed.allSatisfy { $0.header("If-Range") == "\"v1-1\"" })
            for segment in atKill where segment.committed == segment.end {
                #expect(
                    !starts.contains { $0 >= segment.start && $0 < segment.end! },
                    "a finished segment is not fetched again"
                )
            }
        }
    }

    @Test("kill -9 during a download from two sources: the rerun asks each with its own If-Range, the file is whole")
    func killNineWithMirror() async throws {
        let temp = try TemporaryDirectory()
        let home = try temp.directory("home")
        let out = try temp.directory("out")
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                a.set("/big.bin", .init(size: Self.size, etag: .fixed("\"a\""), bytesPerSecond: 1 << 20))
                b.set("/big.bin", .init(size: Self.size, etag: .fixed("\"b\""), bytesPerSecond: 1 << 20))
                let arguments = [
                    "get", "-q", "-x", "4", "--min-split", "1M", "-d", out, "--checkpoint-interval", "0.25",
                    "--mirror", b.url("/big.bin").absoluteString, a.url("/big.bin").absoluteString,
                ]
                let child = try HaulProcess(arguments, home: home)
                let store = try Store(path: (home as NSString).appendingPathComponent("haul.sqlite"))
                func sources() async throws -> [DownloadSource] {
                    try await store.allTasks().first?.sources ?? []
                }
                // Killed once the mirror's bytes are committed with its validators.
                #expect(
                    try await waitUntil {
                        let sources = try await sources()
                        return sources.count == 2 && sources[1].verified && sources[1].bytes > 0
                    }
                )
                child.kill(SIGKILL)
                #expect(await child.finish().status == SIGKILL)
                #expect(try await sources()[1].validators?.etag == "\"b\"")

                a.update("/big.bin") { $0.bytesPerSecond = 4 << 20 }
                b.update("/big.bin") { $0.bytesPerSecond = 4 << 20 }
                let (beforeA, beforeB) = (a.requests(for: "/big.bin").count, b.requests(for: "/big.bin").count)
                let rerun = try await HaulProcess.run(arguments, home: home)
                #expect(rerun.status == 0, "\(rerun.stderr)")
                #expect(sha256(file: (out as NSString).appendingPathComponent("big.bin")) == a.sha256("/big.bin"))
                let resumedA = a.requests(for: "/big.bin").dropFirst(beforeA)
                let resumedB = b.requests(for: "/big.bin").dropFirst(beforeB)
                #expect(!resumedB.isEmpty, "the mirror served the rest too, without being checked again")
                #expect(resumedA.allSatisfy { $0.header("Range") != nil && $0.header("If-Range") == "\"a\"" })
                #expect(resumedB.allSatisfy { $0.header("Range") != nil && $0.header("If-Range") == "\"b\"" })
            }
        }
    }

    @Test("kill -9 during a download with piece hashes: the rerun checks exactly the pieces not recorded as verified")
    func killNineWithPieces() async throws {
        let temp = try TemporaryDirectory()
        let home = try temp.directory("home")
        let out = try temp.directory("out")
        try await TestServer.withServer { a in
            a.set("/big.bin", .init(size: Self.size, bytesPerSecond: 1 << 20))
            let pieces = try Fixtures.pieceHashes(of: a.content("/big.bin"))
            let hashes = (0..<pieces.count).map { "<hash>\(pieces.hex($0))</hash>" }.joined()
            try """
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="big.bin">
                <pieces length="\(Fixtures.pieceLength)" type="sha-256">\(hashes)</pieces>
                <url>\(a.url("/big.bin").absoluteString)</url>
              </file>
            </metalink>
            """.write(toFile: temp.file("big.meta4"), atomically: true, encoding: .utf8)
            let arguments = [
                "get", "-x", "2", "--min-split", "1M", "-d", out, "--checkpoint-interval", "0.25",
                "-M", temp.file("big.meta4"),
            ]
            let child = try HaulProcess(arguments, home: home)
            let store = try Store(path: (home as NSString).appendingPathComponent("haul.sqlite"))
            func verified() async throws -> Int {
                try await store.read { db in
                    let bitmap = try Data.fetchOne(db, sql: "SELECT verified FROM piece") ?? Data()
                    return bitmap.reduce(0) { $0 + $1.nonzeroBitCount }
                }
            }
            // Killed once some pieces are recorded as verified with a checkpoint.
            #expect(try await waitUntil { try await verified() >= 4 })
            child.kill(SIGKILL)
            #expect(await child.finish().status == SIGKILL)
            let before = try await verified()
            #expect(before < pieces.count)

            a.update("/big.bin") { $0.bytesPerSecond = nil }
            let rerun = try await HaulProcess.run(arguments, home: home)
            #expect(rerun.status == 0, "\(rerun.stderr)")
            #expect(sha256(file: (out as NSString).appendingPathComponent("big.bin")) == a.sha256("/big.bin"))
            #expect(rerun.stderr.contains("; \(pieces.count - before) pieces checked"), "\(rerun.stderr)")
        }
    }
}
