import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// `haul get -N`: a file already at the destination is checked against the server, as
/// `wget -N URL` and `curl -z FILE -o FILE URL` do.
@Suite("haul get -N (timestamping)", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct TimestampingTests {
    static let nginxUsable = ExternalServer.nginx != nil || ExternalServer.isCI
    static let firstTime = Date(timeIntervalSince1970: 1_735_689_600)  // 2025-01-01
    static let secondTime = Date(timeIntervalSince1970: 1_748_736_000)  // 2025-06-01

    /// Writes `count` bytes of content `seed` at `path`, modified at `time`; returns its digest.
    static func write(_ path: String, count: Int = 1_000_000, seed: UInt64, modified time: Date) throws -> String {
        let bytes = TestContent.bytes(count: count, seed: seed)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        try FileManager.default.setAttributes([.modificationDate: time], ofItemAtPath: path)
        return TestContent.sha256(bytes)
    }

    static func modified(_ path: String) throws -> Date {
        try #require(try FileManager.default.attributesOfItem(atPath: path)[.modificationDate] as? Date)
    }

    @Test(
        "nginx: -N asks with the recorded ETag; 304 keeps the file, a new version replaces it",
        .enabled(if: nginxUsable)
    )
    func recordedETag() async throws {
        try await ExternalServer.with(try await ExternalServer.startNginx()) { server in
            let first = try Self.write(server.root + "/f.bin", seed: 1, modified: Self.firstTime)
            let temp = try TemporaryDirectory()
            let url = server.url("/f.bin").absoluteString
            let get = try await HaulProcess.get([url], in: temp)
            #expect(get.status == 0, "\(get.stderr)")

            // Without -N: no request, and the message names -N.
            let again = try await HaulProcess.get([url], in: temp)
            #expect(again.stderr.contains("Already complete: \(temp.file("f.bin"))"))
            #expect(again.stderr.contains("-N asks the server for a newer version"))
            #expect(server.accessLog().count == 1)

            // -N, unchanged: one conditional request, a 304, the file untouched.
            let unchanged = try await HaulProcess.get(["-N", url], in: temp)
            #expect(unchanged.status == 0, "\(unchanged.stderr)")
            #expect(unchanged.stderr.contains("Up to date: \(temp.file("f.bin"))"), "\(unchanged.stderr)")
            let check = try #require(server.accessLog().last)
            #expect(check[1] == "304")
            #expect(check[7].hasPrefix("\"") && check[7].hasSuffix("\""), "If-None-Match: nginx's ETag: \(check)")
            #expect(check[8] == "-" || check[8].isEmpty, "the ETag alone, not If-Modified-Since: \(check)")
            #expect(sha256(file: temp.file("f.bin")) == first)

            // A new version on the server: fetched in full and put in place.
            let second = try Self.write(server.root + "/f.bin", count: 1_200_000, seed: 2, modified: Self.secondTime)
            let changed = try await HaulProcess.get(["-N", url], in: temp)
            #expect(changed.status == 0, "\(changed.stderr)")
            #expect(changed.stderr.contains("Saved \(temp.file("f.bin"))"), "\(changed.stderr)")
            let fetch = try #require(server.accessLog().last)
            #expect(fetch[1] == "200" && fetch[4] == "1200000", "\(fetch)")
            #expect(fetch[7] == check[7], "asked with the ETag of the file it had")
            #expect(sha256(file: temp.file("f.bin")) == second)
            #expect(try Self.modified(temp.file("f.bin")) == Self.secondTime, "the new Last-Modified")
            #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin.part")))

            // And -N again: up to date with the new ETag.
            let after = try await HaulProcess.get(["-N", url], in: temp)
            #expect(after.stderr.contains("Up to date"))
            #expect(server.accessLog().last?[1] == "304")
        }
    }

    @Test(
        "nginx: a file Haul did not download is compared by its modification time (If-Modified-Since)",
        .enabled(if: nginxUsable)
    )
    func foreignFile() async throws {
        try await ExternalServer.with(try await ExternalServer.startNginx()) { server in
            let served = try Self.write(server.root + "/f.bin", seed: 1, modified: Self.secondTime)
            let temp = try TemporaryDirectory()
            let url = server.url("/f.bin").absoluteString
            // As curl -R would have left it: the server's content and time.
            _ = try Self.write(temp.file("f.bin"), seed: 1, modified: Self.secondTime)
            let same = try await HaulProcess.get(["-N", url], in: temp)
            #expect(same.status == 0, "\(same.stderr)")
            #expect(same.stderr.contains("Up to date"), "\(same.stderr)")
            let check = try #require(server.accessLog().last)
            #expect(check[1] == "304")
            #expect(check[8] == "Sun, 01 Jun 2025 00:00:00 GMT", "\(check)")

            // An older file of the same name: replaced by the server's.
            let old = try Self.write(temp.file("g.bin"), seed: 9, modified: Self.firstTime)
            let refused = try await HaulProcess.get(["-o", "g.bin", url], in: temp)
            #expect(refused.status == 3, "without -N the file is not touched: \(refused.stderr)")
            #expect(sha256(file: temp.file("g.bin")) == old)
            let replaced = try await HaulProcess.get(["-N", "-o", "g.bin", url], in: temp)
            #expect(replaced.status == 0, "\(replaced.stderr)")
            #expect(server.accessLog().last?[8] == "Wed, 01 Jan 2025 00:00:00 GMT")
            #expect(server.accessLog().last?[1] == "200")
            #expect(sha256(file: temp.file("g.bin")) == served)
        }
    }

    @Test("a server that ignores conditions: the same ETag and length are up to date; a new ETag is a new version")
    func serverIgnoresConditions() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 400_000))
            let url = server.url("/f.bin").absoluteString
            #expect(try await HaulProcess.get([url], in: temp).status == 0)
            let same = try await HaulProcess.get(["-N", url], in: temp)
            #expect(same.stderr.contains("Up to date"), "\(same.stderr)")
            #expect(server.requests(for: "/f.bin").last?.header("If-None-Match") == "\"v1-1\"")
            #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"))

            server.bumpVersion("/f.bin")
            let changed = try await HaulProcess.get(["-N", url], in: temp)
            #expect(changed.stderr.contains("Saved"), "\(changed.stderr)")
            #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"))
            // The check's 200 was the download: one request.
            #expect(server.requests(for: "/f.bin").count == 3)
        }
    }

    @Test("the old file stays in place until the new version is complete, across a pause")
    func oldFileStaysUntilTheNewOneIsDone() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: 2_000_000))
            let oldDigest = server.sha256("/f.bin")
            var request = DownloadRequest(url: server.url("/f.bin"), destination: .directory(temp.path))
            _ = try await downloader.download(request).result()

            server.bumpVersion("/f.bin")
            server.update("/f.bin") { $0.bytesPerSecond = 256 << 10 }
            request.checkNewer = true
            let task = try await downloader.download(request)
            #expect(try await waitUntil { task.progress.bytesReceived > 64 << 10 })
            let resumeData = try await task.pause()
            #expect(sha256(file: temp.file("f.bin")) == oldDigest, "the old version, whole, while the new one comes")

            server.update("/f.bin") { $0.bytesPerSecond = nil }
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(!result.alreadyComplete && !result.notModified)
            #expect(result.resumedFrom != nil, "the new version resumed from its checkpoint")
            #expect(server.requests(for: "/f.bin").last?.header("If-Range") == "\"v2-1\"")
            #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"))
            let again = try await downloader.download(request).result()
            #expect(again.notModified)
        }
    }

    @Test("a name the server would choose that is taken is refused, not replaced unasked")
    func serverChosenNameIsNotReplaced() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/dl", .init(size: 100_000, contentDisposition: "attachment; filename=named.bin"))
            let mine = try Self.write(temp.file("named.bin"), count: 1000, seed: 5, modified: Self.firstTime)
            let result = try await HaulProcess.get(["-N", server.url("/dl").absoluteString], in: temp)
            #expect(result.status == 3, "\(result.stderr)")
            #expect(result.stderr.contains("already exists"), "\(result.stderr)")
            #expect(sha256(file: temp.file("named.bin")) == mine)
        }
    }

    @Test("haul add -N: the daemon checks its completed file against the server")
    func daemonChecksNewer() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 300_000))
            let url = server.url("/f.bin").absoluteString
            for arguments in [["add", "-d", out, url], ["add", "-N", "-d", out, url]] {
                if arguments.contains("-N") { server.bumpVersion("/f.bin") }
                let added = try await HaulProcess.run(arguments, home: home)
                #expect(added.status == 0, "\(added.stderr)")
                let waited = try await HaulProcess.run(["wait"], home: home)
                #expect(waited.status == 0, "\(waited.stderr)")
                #expect(sha256(file: out + "/f.bin") == server.sha256("/f.bin"))
            }
            #expect(server.requests(for: "/f.bin").last?.header("If-None-Match") == "\"v1-1\"")
            _ = try await HaulProcess.run(["add", "-N", "-d", out, url], home: home)
            #expect(try await HaulProcess.run(["wait"], home: home).status == 0)
            let events = try await HaulProcess.run(["events", "--json", "--no-follow"], home: home)
            let completed = events.stdout.split(separator: "\n").filter { $0.contains("\"event\":\"completed\"") }
            #expect(completed.count == 3, "\(events.stdout)")
            #expect(completed.last?.contains("\"notModified\":true") == true, "\(completed)")
            #expect(completed.dropLast().allSatisfy { !$0.contains("notModified") })
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }
}
