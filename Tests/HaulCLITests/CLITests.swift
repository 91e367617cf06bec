import CHaulSystem
import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// `haul get` as a user meets it: exit codes, one-line errors, quiet output.
@Suite("haul get command line", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct CLITests {
    @Test func downloadsQuietlyAndSaysNothing() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 300_000))
            let digest = server.sha256("/a.bin")
            let result = try await HaulProcess.run(
                ["get", "-q", "--checksum", "sha256=\(digest)", server.url("/a.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(result.status == 0)
            #expect(result.stdout.isEmpty && result.stderr.isEmpty)
            #expect(sha256(file: temp.file("a.bin")) == digest)
        }
    }

    @Test func notOnATerminalPrintsPlainLinesWithoutEscapes() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 300_000))
            let result = try await HaulProcess.run(
                ["get", "-o", "named.bin", server.url("/a.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(result.status == 0)
            #expect(!result.stderr.contains("\u{1B}"))
            #expect(result.stderr.contains("Saved \(temp.file("named.bin"))"))
            // A second run finds the verified file and makes no request.
            let again = try await HaulProcess.run(
                ["get", "-o", "named.bin", server.url("/a.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(again.status == 0)
            #expect(again.stderr.contains("Already complete"))
            #expect(server.requests(for: "/a.bin").count == 1)
        }
    }

    @Test("-v logs Haul's requests and decisions, not the HTTP library's internals")
    func verboseShowsHaulsOwnLines() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 10_000))
            let result = try await HaulProcess.run(
                ["get", "-v", "-o", "a.bin", server.url("/a.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.contains("[Haul] GET"), "\(result.stderr)")
            #expect(result.stderr.contains("[Haul] completed"), "\(result.stderr)")
            #expect(!result.stderr.contains("ahc-"), "\(result.stderr)")
        }
    }

    @Test("off a terminal a retry is said once: no progress line repeats 'retrying in' while it waits")
    func retrySaidOnceOffATerminal() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            // Six seconds of waiting: longer than the five between plain progress lines.
            var resource = TestServer.Resource(size: 10_000)
            resource.failFirst = 1
            resource.failStatus = 503
            resource.retryAfter = "6"
            server.set("/a.bin", resource)
            let result = try await HaulProcess.run(
                ["get", "-o", "a.bin", server.url("/a.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(result.status == 0, "\(result.stderr)")
            let retrying = result.stderr.split(separator: "\n").filter { $0.contains("retrying in") }
            #expect(retrying.count == 1, "\(result.stderr)")
            #expect(
                retrying.first?.hasPrefix("haul: retrying in 6.0 s (1 of 5, the server asked): HTTP 503") == true,
                "\(result.stderr)"
            )
        }
    }

    @Test(arguments: [
        (["get", "ftp://example.org/x"], "Unsupported URL scheme 'ftp'", Int32(2)),
        (["get", "http://"], "Invalid URL", 2),
        (["get", "--checksum", "sha256=xyz", "http://127.0.0.1:1/x"], "Invalid sha256 checksum", 2),
        (["get", "-H", "NoColon", "http://127.0.0.1:1/x"], "Invalid header", 2),
        (["get", "-d", "/dev/null/dir", "http://127.0.0.1:1/x"], "Cannot create the directory /dev/null", 3),
        // The unknown option is what is wrong, not the -o its value seemed to make a second URL of.
        (["get", "--bogus", "X", "-o", "f", "http://127.0.0.1:1/x"], "Unknown option '--bogus'", 2),
        (["get", "-o", "f", "http://127.0.0.1:1/x", "http://127.0.0.1:1/y"], "-o names one file, and 2 URLs", 2),
        // A wrong URL creates no directory (checked below).
        (["get", "-d", "not-made", "ftp://example.org/x"], "Unsupported URL scheme 'ftp'", 2),
    ])
    func badInputIsOneClearLine(arguments: [String], message: String, status: Int32) async throws {
        let temp = try TemporaryDirectory()
        let result = try await HaulProcess.run(arguments, home: temp.file("home"), directory: temp.path)
        #expect(result.status == status, "\(result.stderr)")
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1, "\(result.stderr)")
        #expect(result.stderr.hasPrefix("haul: error: "))
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: temp.file("not-made")))
    }

    @Test("-d creates the directory and its missing parents, for haul get and haul add alike")
    func directoryIsCreated() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 300_000, seed: 5))
            let got = try await HaulProcess.run(
                ["get", "-q", "-d", "new/sub/dir", server.url("/a.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(got.status == 0, "\(got.stderr)")
            #expect(sha256(file: temp.file("new/sub/dir/a.bin")) == server.sha256("/a.bin"))
            let home = temp.file("daemon-home")
            let added = try await HaulProcess.run(
                ["add", "-d", temp.file("queued/here"), server.url("/a.bin").absoluteString],
                home: home
            )
            #expect(added.status == 0, "\(added.stderr)")
            let waited = try await HaulProcess.run(["wait"], home: home)
            #expect(waited.status == 0, "\(waited.stderr)")
            #expect(sha256(file: temp.file("queued/here/a.bin")) == server.sha256("/a.bin"))
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }

    @Test func existingFileIsKeptWithoutForce() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 1000))
            _ = FileManager.default.createFile(atPath: temp.file("a.bin"), contents: Data("keep me".utf8))
            let refused = try await HaulProcess.run(
                ["get", server.url("/a.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(refused.status == 3)
            #expect(refused.stderr.contains("already exists") && refused.stderr.contains("--force"))
            #expect(FileManager.default.contents(atPath: temp.file("a.bin")) == Data("keep me".utf8))
            let forced = try await HaulProcess.run(
                ["get", "--force", server.url("/a.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(forced.status == 0, "\(forced.stderr)")
            #expect(sha256(file: temp.file("a.bin")) == server.sha256("/a.bin"))
        }
    }

    @Test func httpErrorNamesStatusAndURL() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            let result = try await HaulProcess.run(
                ["get", server.url("/missing").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(result.status == 6)
            // One error line, the last (a slow machine may have shown a progress line before it).
            let expected = "haul: error: HTTP 404 Not Found for \(server.url("/missing")). Check the URL"
            #expect(result.stderr.split(separator: "\n").filter { $0.hasPrefix("haul:") } == [Substring(expected)])
            #expect(result.stderr.hasSuffix(expected + "\n"), "\(result.stderr)")
        }
    }

    @Test("a failure before the first byte (404 with -o, a refused port) leaves no part file behind")
    func noEmptyPartFile() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            let missing = try await HaulProcess.run(
                ["get", "-o", "NAME", server.url("/missing").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(missing.status == 6, "\(missing.stderr)")
            let refused = try await HaulProcess.run(
                ["get", "--retries", "0", "-o", "OTHER", "http://127.0.0.1:1/x"],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(refused.status == 4, "\(refused.stderr)")
            #expect(!refused.stderr.contains("resume"), "nothing fetched, nothing to resume: \(refused.stderr)")
            let left = try FileManager.default.contentsOfDirectory(atPath: temp.path).filter { $0 != "home" }
            #expect(left.isEmpty, "\(left)")
            // The same command works once the file is there, from byte 0.
            server.set("/missing", .init(size: 200_000, seed: 3))
            let again = try await HaulProcess.run(
                ["get", "-o", "NAME", server.url("/missing").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(again.status == 0, "\(again.stderr)")
            #expect(sha256(file: temp.file("NAME")) == server.sha256("/missing"))
        }
    }

    @Test(
        "the finished file takes the server's Last-Modified as its mtime, as wget and curl -R; --no-remote-time keeps the time of writing"
    )
    func remoteTime() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            let stamp = Date(timeIntervalSince1970: 1_500_000_000)
            server.set("/t.bin", .init(size: 300_000, seed: 4, lastModified: stamp))
            server.set("/none.bin", .init(size: 1_000, seed: 5, lastModified: nil))
            let started = Date().addingTimeInterval(-2)
            for (name, flags) in [("t.bin", [String]()), ("u.bin", ["--no-remote-time"]), ("none.bin", [])] {
                let path = name == "none.bin" ? "/none.bin" : "/t.bin"
                let got = try await HaulProcess.run(
                    ["get", "-q"] + flags + ["-o", name, server.url(path).absoluteString],
                    home: temp.file("home"),
                    directory: temp.path
                )
                #expect(got.status == 0, "\(got.stderr)")
            }
            func modified(_ name: String) throws -> Date? {
                try FileManager.default.attributesOfItem(atPath: temp.file(name))[.modificationDate] as? Date
            }
            #expect(try modified("t.bin") == stamp)
            // Without the flag's effect, or with no Last-Modified to take: the time of writing.
            #expect(try modified("u.bin").map { $0 >= started } == true)
            #expect(try modified("none.bin").map { $0 >= started } == true)
            #expect(sha256(file: temp.file("t.bin")) == server.sha256("/t.bin"))
            // The daemon's downloads alike, and its --no-remote-time.
            for (home, flags, out) in [("d1", [String](), "by-daemon"), ("d2", ["--no-remote-time"], "kept-time")] {
                let started = try await HaulProcess.run(["daemon"] + flags, home: temp.file(home))
                #expect(started.status == 0, "\(started.stderr)")
                let added = try await HaulProcess.run(
                    ["add", "-o", out, "-d", temp.path, server.url("/t.bin").absoluteString],
                    home: temp.file(home)
                )
                #expect(added.status == 0, "\(added.stderr)")
                #expect(try await HaulProcess.run(["wait"], home: temp.file(home)).status == 0)
                _ = try await HaulProcess.run(["daemon", "stop"], home: temp.file(home))
            }
            #expect(try modified("by-daemon") == stamp)
            #expect(try modified("kept-time").map { $0 >= started } == true)
        }
    }

    /// The value of an extended attribute, nil when the file has none of that name.
    static func attribute(_ name: String, of path: String) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var buffer = [UInt8](repeating: 0, count: 4096)
        let n = chaul_fgetxattr(fd, name, &buffer, buffer.count)
        return n < 0 ? nil : String(decoding: buffer.prefix(n), as: UTF8.self)
    }

    @Test("a finished file records its URL, without credentials, in user.xdg.origin.url; --no-xattr leaves it out")
    func originAttribute() async throws {
        let temp = try TemporaryDirectory()
        // The file system must keep user attributes for this to mean anything: check it does.
        let probe = open(temp.file("probe"), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        defer { close(probe) }
        try #require(chaul_fsetxattr(probe, "user.probe", "x", 1) == 0, "no user xattrs in \(temp.path)")
        try await TestServer.withServer { server in
            server.set("/t.bin", .init(size: 200_000))
            var parts = URLComponents(url: server.url("/t.bin"), resolvingAgainstBaseURL: false)!
            parts.user = "alice"
            parts.password = "s3cret"
            parts.query = "token=abc123"
            let url = parts.url!.absoluteString
            for (name, flags) in [("with.bin", [String]()), ("without.bin", ["--no-xattr"])] {
                let got = try await HaulProcess.run(
                    ["get", "-q"] + flags + ["-o", name, url],
                    home: temp.file("home"),
                    directory: temp.path
                )
                #expect(got.status == 0, "\(got.stderr)")
            }
            let recorded = try #require(Self.attribute("user.xdg.origin.url", of: temp.file("with.bin")))
            #expect(recorded.hasPrefix("http://127.0.0.1:\(server.port)/t.bin?token="), "\(recorded)")
            #expect(!recorded.contains("alice") && !recorded.contains("s3cret") && !recorded.contains("abc123"))
            #expect(Self.attribute("user.xdg.origin.url", of: temp.file("without.bin")) == nil)
            #expect(Self.attribute("user.haul.task", of: temp.file("with.bin")) == nil, "the part file's mark is gone")
            // The daemon's downloads alike, and its --no-xattr.
            for (home, flags, out) in [("d1", [String](), "by-daemon"), ("d2", ["--no-xattr"], "plain")] {
                #expect(try await HaulProcess.run(["daemon"] + flags, home: temp.file(home)).status == 0)
                let added = try await HaulProcess.run(
                    ["add", "-o", out, "-d", temp.path, server.url("/t.bin").absoluteString],
                    home: temp.file(home)
                )
                #expect(added.status == 0, "\(added.stderr)")
                #expect(try await HaulProcess.run(["wait"], home: temp.file(home)).status == 0)
                _ = try await HaulProcess.run(["daemon", "stop"], home: temp.file(home))
            }
            #expect(
                Self.attribute("user.xdg.origin.url", of: temp.file("by-daemon")) == server.url("/t.bin").absoluteString
            )
            #expect(Self.attribute("user.xdg.origin.url", of: temp.file("plain")) == nil)
            // A URL this short is kept in the inode: the file takes no more room than one
            // without it (ext4 put it in a block of its own while the part file's mark was there).
            func blocks(_ path: String) -> Int {
                var info = stat()
                return stat(path, &info) == 0 ? Int(info.st_blocks) : -1
            }
            #expect(blocks(temp.file("by-daemon")) == blocks(temp.file("plain")))
        }
    }

    @Test func sigintPausesAndTheRerunResumes() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            // Held at 2 MiB until the rerun: still under way at the SIGINT, however slow the machine.
            server.set("/a.bin", .init(size: 8 << 20, holdAt: 2 << 20))
            let arguments = ["get", server.url("/a.bin").absoluteString]
            let child = try HaulProcess(arguments, home: temp.file("home"), directory: temp.path)
            // Written to the part file, not only sent: bytes still in the socket are not Haul's yet.
            #expect(try await waitUntil { fileSize(temp.file("a.bin.part")) > 1 << 20 })
            child.kill(SIGINT)
            let paused = await child.finish()
            #expect(paused.status == 130)
            #expect(paused.stderr.contains("Paused at") && paused.stderr.contains("Run the same command again"))
            server.release("/a.bin")
            let rerun = try await HaulProcess.run(arguments, home: temp.file("home"), directory: temp.path)
            #expect(rerun.status == 0)
            #expect(rerun.stderr.contains("resumed at"), "\(paused.stderr)")
            #expect(sha256(file: temp.file("a.bin")) == server.sha256("/a.bin"))
            let range = try #require(server.requests(for: "/a.bin").last?.header("Range"))
            #expect(range != "bytes=0-" && range.hasPrefix("bytes="))
        }
    }

    @Test func twoProcessesShareOneNewStore() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 2 << 20, seed: 1))
            server.set("/b.bin", .init(size: 2 << 20, seed: 2))
            let home = temp.file("home")
            let a = try HaulProcess(
                ["get", "-q", server.url("/a.bin").absoluteString],
                home: home,
                directory: temp.path
            )
            let b = try HaulProcess(
                ["get", "-q", server.url("/b.bin").absoluteString],
                home: home,
                directory: temp.path
            )
            let (ra, rb) = await (a.finish(), b.finish())
            #expect(ra.status == 0, "\(ra.stderr)")
            #expect(rb.status == 0, "\(rb.stderr)")
            #expect(sha256(file: temp.file("a.bin")) == server.sha256("/a.bin"))
            #expect(sha256(file: temp.file("b.bin")) == server.sha256("/b.bin"))
            let store = try Store(path: home + "/haul.sqlite")
            let states = try await store.allTasks().map(\.state)
            #expect(states == [.completed, .completed])
        }
    }
}
