import Foundation
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// `haul get --continue`: a partial file another tool left is continued, as `wget -c URL`,
/// `curl -C - -o FILE URL` and `aria2c -c URL` do, but only once the server confirms it.
@Suite("haul get --continue", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct ContinueTests {
    static let nginxUsable = ExternalServer.nginx != nil || ExternalServer.isCI
    static let size = 4_000_000
    static let prefix = 1_500_000

    static func writeServerFile(_ server: ExternalServer) throws -> [UInt8] {
        let bytes = TestContent.bytes(count: size, seed: 11)
        try Data(bytes).write(to: URL(fileURLWithPath: server.root + "/f.bin"))
        return bytes
    }

    /// Runs curl, the tool that left the partial file.
    static func curl(_ arguments: [String]) async throws {
        let curl = try #require(ExternalServer.findExecutable("curl"), "curl is not installed (apt-get install curl)")
        let result = try await Command.run(curl, arguments)
        try #require(result.status == 0, "curl failed: \(result.output)")
    }

    @Test(
        "nginx: a prefix curl made is checked (its last 64 KiB) and only the rest is fetched",
        .enabled(if: nginxUsable)
    )
    func continuesCurlPrefix() async throws {
        try await ExternalServer.with(try await ExternalServer.startNginx()) { server in
            let bytes = try Self.writeServerFile(server)
            let temp = try TemporaryDirectory()
            let url = server.url("/f.bin").absoluteString
            try await Self.curl(["-s", "-r", "0-\(Self.prefix - 1)", "-o", temp.file("f.bin"), url])
            #expect(FileOps.size(temp.file("f.bin")) == Int64(Self.prefix))

            // Without --continue the file is not touched.
            let refused = try await HaulProcess.get([url], in: temp)
            #expect(refused.status == 3, "\(refused.stderr)")
            #expect(refused.stderr.contains("already exists"))

            let before = server.accessLog().count
            let result = try await HaulProcess.get(["--continue", "-x", "1", url], in: temp)
            #expect(result.status == 0, "\(result.stderr)")
            #expect(sha256(file: temp.file("f.bin")) == TestContent.sha256(bytes))
            #expect(result.stderr.contains("resumed at 1.43 MiB"), "\(result.stderr)")
            let log = Array(server.accessLog().dropFirst(before))
            // The check: exactly the 64 KiB before the end of the prefix.
            #expect(log.first?[2] == "bytes=\(Self.prefix - 65536)-\(Self.prefix - 1)", "\(log)")
            #expect(log.first?[1] == "206")
            let fetched = log.reduce(0) { $0 + (Int($1[4]) ?? 0) }
            #expect(fetched <= Self.size - Self.prefix + 2 * 65536, "only the rest, and the overlaps: \(log)")
            #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin.part")))
        }
    }

    @Test("a file that is not this one's beginning is refused and left as it was", .enabled(if: nginxUsable))
    func wrongPrefixRefused() async throws {
        try await ExternalServer.with(try await ExternalServer.startNginx()) { server in
            _ = try Self.writeServerFile(server)
            let temp = try TemporaryDirectory()
            let url = server.url("/f.bin").absoluteString
            let other = TestContent.bytes(count: Self.prefix, seed: 12)
            try Data(other).write(to: URL(fileURLWithPath: temp.file("f.bin")))
            let result = try await HaulProcess.get(["--continue", url], in: temp)
            #expect(result.status == 3, "\(result.stderr)")
            #expect(
                result.stderr.contains("f.bin cannot be continued: its last 65536 bytes differ"),
                "\(result.stderr)"
            )
            #expect(result.stderr.contains("--force"))
            #expect(sha256(file: temp.file("f.bin")) == TestContent.sha256(other))
            let left = try FileManager.default.contentsOfDirectory(atPath: temp.path).filter { $0 != "home" }
            #expect(left == ["f.bin"], "no part file: \(left)")

            // Longer than the server's file: refused too.
            try Data(TestContent.bytes(count: Self.size + 10, seed: 11)).write(
                to: URL(fileURLWithPath: temp.file("long.bin"))
            )
            let long = try await HaulProcess.get(["--continue", "-o", "long.bin", url], in: temp)
            #expect(long.status == 3, "\(long.stderr)")
            #expect(long.stderr.contains("long.bin cannot be continued: it is longer"), "\(long.stderr)")
            #expect(FileOps.size(temp.file("long.bin")) == Int64(Self.size + 10))
        }
    }

    @Test("a NAME.part no download owns is continued; a whole file is confirmed without fetching it again")
    func strayPartAndWholeFile() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: Self.size))
            let url = server.url("/f.bin").absoluteString
            let bytes = server.content("/f.bin")
            try Data(bytes.prefix(Self.prefix)).write(to: URL(fileURLWithPath: temp.file("f.bin.part")))
            let result = try await HaulProcess.get(["--continue", "-x", "1", url], in: temp)
            #expect(result.status == 0, "\(result.stderr)")
            #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"))
            #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin.part")))
            #expect(server.bodyBytesSent("/f.bin") <= Self.size - Self.prefix + 2 * 65536)

            // The whole file, made by another tool: one check of its end, nothing more.
            try Data(bytes).write(to: URL(fileURLWithPath: temp.file("g.bin")))
            let sent = server.bodyBytesSent("/f.bin")
            let whole = try await HaulProcess.get(["--continue", "-o", "g.bin", url], in: temp)
            #expect(whole.status == 0, "\(whole.stderr)")
            #expect(sha256(file: temp.file("g.bin")) == server.sha256("/f.bin"))
            #expect(server.bodyBytesSent("/f.bin") - sent <= 2 * 65536)
        }
    }

    @Test("a server that sends only whole files cannot continue a file: refused, nothing changed")
    func noRanges() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 500_000, ranges: false))
            try Data(server.content("/f.bin").prefix(100_000)).write(to: URL(fileURLWithPath: temp.file("f.bin")))
            let result = try await HaulProcess.get(["--continue", server.url("/f.bin").absoluteString], in: temp)
            #expect(result.status == 3, "\(result.stderr)")
            #expect(result.stderr.contains("the server sends only whole files"), "\(result.stderr)")
            #expect(FileOps.size(temp.file("f.bin")) == 100_000)
        }
    }
}

/// The two file conventions cross the daemon's API as the request had them.
@Suite("-N and --continue through the API", .timeLimit(.minutes(10)))
struct FileConventionWireTests {
    @Test func roundTrip() throws {
        var request = DownloadRequest(url: URL(string: "http://127.0.0.1:1/f")!, destination: .directory("/data"))
        let plain = String(decoding: try JSONEncoder().encode(API.AddRequest.Download(request)), as: UTF8.self)
        #expect(!plain.contains("checkNewer") && !plain.contains("continuesExistingFile"), "absent when off: \(plain)")
        request.checkNewer = true
        request.continuesExistingFile = true
        let data = try JSONEncoder().encode(API.AddRequest.Download(request))
        let back = try JSONDecoder().decode(API.AddRequest.Download.self, from: data).request()
        #expect(back.checkNewer && back.continuesExistingFile)
    }
}
