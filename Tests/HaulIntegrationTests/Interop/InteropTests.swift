import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// Against real servers: nginx (strong ETags, If-Range, ranges) and Python's http.server
/// (no ranges). A missing server skips these locally and fails them in CI (`CI` set).
@Suite(
    "Interop with real servers",
    .serialized,
    .tags(.process, .nginx, .slow),
    .leftOutOfFastLoop,
    .timeLimit(.minutes(20))
)
struct InteropTests {
    static let nginxUsable = ExternalServer.nginx != nil || ExternalServer.isCI
    static let size = 16 << 20

    static func writeFile(_ path: String, seed: UInt64) throws -> String {
        let bytes = TestContent.bytes(count: size, seed: seed)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return TestContent.sha256(bytes)
    }

    @Test("nginx: pause mid-transfer, resume with If-Range: the ETag nginx sent, get a 206", .enabled(if: nginxUsable))
    func nginxPauseResume() async throws {
        try await ExternalServer.with(try await ExternalServer.startNginx(slowRate: "4m")) { server in
            let digest = try Self.writeFile(server.root + "/big.bin", seed: 7)
            let temp = try TemporaryDirectory()
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("haul.sqlite"))) {
                downloader in
                let task = try await downloader.download(
                    DownloadRequest(url: server.url("/slow/big.bin"), destination: .directory(temp.path))
                )
                #expect(try await waitUntil { task.progress.bytesReceived > 2 << 20 })
                let resumeData = try await task.pause()
                let etag = try #require(resumeData.validators.strongETag)
                let result = try await downloader.download(resumingFrom: resumeData).result()
                #expect(sha256(file: result.path) == digest)
                let log = server.accessLog()
                let last = try #require(log.last)
                #expect(last[1] == "206")
                #expect(last[2] == resumeRange(from: resumeData.bytesCommitted))
                #expect(last[3] == etag)
                #expect(Int(last[4]) == Self.size - Int(resumeData.bytesCommitted) + Int(TransferRules.overlapLength))
            }
        }
    }

    @Test("nginx: the file changes during a pause; the new file arrives whole, never mixed", .enabled(if: nginxUsable))
    func nginxChangedDuringPause() async throws {
        try await ExternalServer.with(try await ExternalServer.startNginx(slowRate: "4m")) { server in
            let path = server.root + "/big.bin"
            let oldDigest = try Self.writeFile(path, seed: 7)
            let temp = try TemporaryDirectory()
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("haul.sqlite"))) {
                downloader in
                let task = try await downloader.download(
                    DownloadRequest(url: server.url("/slow/big.bin"), destination: .directory(temp.path))
                )
                #expect(try await waitUntil { task.progress.bytesReceived > 2 << 20 })
                let resumeData = try await task.pause()
                // New content with a different mtime: nginx's ETag changes.
                let newDigest = try Self.writeFile(path, seed: 8)
                try FileManager.default.setAttributes(
                    [.modificationDate: Date().addingTimeInterval(5)],
                    ofItemAtPath: path
                )
                #expect(newDigest != oldDigest)
                let result = try await downloader.download(resumingFrom: resumeData).result()
                #expect(sha256(file: result.path) == newDigest)
                let last = try #require(server.accessLog().last)
                #expect(last[1] == "200", "If-Range must fail and nginx must send the whole new file")
                #expect(last[3] == resumeData.validators.strongETag)
            }
        }
    }

    @Test("nginx: a full download matches, and a second command run makes no request", .enabled(if: nginxUsable))
    func nginxFullDownload() async throws {
        try await ExternalServer.with(try await ExternalServer.startNginx()) { server in
            let digest = try Self.writeFile(server.root + "/big.bin", seed: 3)
            let temp = try TemporaryDirectory()
            let first = try await HaulProcess.run(
                ["get", "-q", "--checksum", "sha256=\(digest)", server.url("/big.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(first.status == 0, "\(first.stderr)")
            #expect(sha256(file: temp.file("big.bin")) == digest)
            let requests = server.accessLog().count
            let second = try await HaulProcess.run(
                ["get", server.url("/big.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(second.status == 0)
            #expect(second.stderr.contains("Already complete"))
            #expect(server.accessLog().count == requests)
        }
    }

    @Test(
        "Python http.server (no ranges): a resume gets a 200 and the body replaces the partial data",
        .enabled(if: ExternalServer.python != nil || ExternalServer.isCI)
    )
    func pythonWithoutRanges() async throws {
        try await ExternalServer.with(try await ExternalServer.startPython()) { server in
            let digest = try Self.writeFile(server.root + "/big.bin", seed: 5)
            try FileManager.default.setAttributes(
                [.modificationDate: Date().addingTimeInterval(-3600)],
                ofItemAtPath: server.root + "/big.bin"
            )
            let temp = try TemporaryDirectory()
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("haul.sqlite"))) {
                downloader in
                let fresh = try await downloader.download(
                    DownloadRequest(url: server.url("/big.bin"), destination: .file(temp.file("fresh.bin")))
                ).result()
                #expect(sha256(file: fresh.path) == digest)

                // A part file of wrong bytes that claims to be half the file, as if the server
                // had served other content before; Python ignores Range, so it must all be replaced.
                let half = Self.size / 2
                let destination = temp.file("resumed.bin")
                let taskID = UUID()
                try writeOwnedPart(
                    at: destination + ".part",
                    owner: taskID,
                    bytes: [UInt8](repeating: 0xAB, count: half)
                )
                let resumeData = ResumeData(
                    taskID: taskID,
                    url: server.url("/big.bin"),
                    finalURL: nil,
                    headers: [],
                    validators: Validators(
                        lastModified: HTTPDate.format(Date().addingTimeInterval(-3600)),
                        date: HTTPDate.format(Date()),
                        totalLength: Int64(Self.size)
                    ),
                    destination: .file(destination),
                    checksum: nil,
                    overwrite: false,
                    partPath: destination + ".part",
                    segments: [.init(start: 0, end: Int64(Self.size), committed: Int64(half))]
                )
                let resumed = try await downloader.download(resumingFrom: resumeData).result()
                #expect(sha256(file: resumed.path) == digest)
                #expect(resumed.bytesFetched == Int64(Self.size))
            }
        }
    }
}
