import Foundation
import HaulClient
import HaulDaemon
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// `haul get` against hostile input and hostile output: names that climb out of `-d`, a
/// closed stdout, a full stderr, impossible ports and malformed option values. None of
/// them may crash it, write outside its directory or lose a checkpoint.
@Suite("haul get: hostile input and output", .serialized, .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct HostileInputTests {
    @Test(
        "an input file's out= cannot leave -d",
        arguments: ["../../escaped.bin", "sub/../../escaped.bin", "/tmp/escaped.bin", "..", "a/./b.bin"]
    )
    func inputFileNamesStayInside(out: String) async throws {
        let temp = try TemporaryDirectory()
        let inside = try temp.directory("a/b/downloads")
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 10_000))
            let list = "\(server.url("/f.bin").absoluteString)\n  out=\(out)\n"
            let result = try await HaulProcess.run(
                ["get", "-q", "-d", inside, "-i", "-"],
                home: temp.file("home"),
                directory: temp.path,
                input: list
            )
            #expect(result.status == 2)
            #expect(result.stderr.contains("would leave the download directory"), "\(result.stderr)")
            #expect(server.requests(for: "/f.bin").isEmpty)
            #expect(!FileManager.default.fileExists(atPath: temp.file("a/escaped.bin")))
            #expect(!FileManager.default.fileExists(atPath: "/tmp/escaped.bin"))
        }
    }

    @Test("an input file's out= may name a file in a subdirectory of -d")
    func inputFileSubdirectory() async throws {
        let temp = try TemporaryDirectory()
        let inside = try temp.directory("downloads")
        _ = try temp.directory("downloads/sub")
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 10_000))
            let result = try await HaulProcess.run(
                ["get", "-q", "-d", inside, "-i", "-"],
                home: temp.file("home"),
                input: "\(server.url("/f.bin").absoluteString)\n  out=sub/g.bin\n"
            )
            #expect(result.status == 0, "\(result.stderr)")
            #expect(sha256(file: inside + "/sub/g.bin") == server.sha256("/f.bin"))
        }
    }

    @Test("stderr on a full device: success stays success, failure stays a failure, never a crash")
    func stderrOnAFullDevice() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 500_000))
            let full = try #require(FileHandle(forWritingAtPath: "/dev/full"))
            let ok = try await HaulProcess(
                ["get", server.url("/f.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path,
                stderr: full
            ).finish()
            #expect(ok.status == 0)
            #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"))
            let failed = try await HaulProcess(
                ["get", server.url("/missing.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path,
                stderr: full
            ).finish()
            #expect(failed.status == 6)
        }
    }

    @Test("--json into a pipe closed after one line: stops quietly with a checkpoint (exit 141); the rerun resumes")
    func jsonIntoAClosedPipe() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        try await TestServer.withServer { server in
            // Held at 2 MiB until the rerun: unfinished when the reader goes, however slow the machine.
            server.set("/f.bin", .init(size: 8 << 20, holdAt: 2 << 20))
            let pipe = Pipe()
            let child = try HaulProcess(
                ["get", "--json", "-x", "1", "--checkpoint-interval", "0.1", server.url("/f.bin").absoluteString],
                home: home,
                directory: temp.path,
                stdout: pipe.fileHandleForWriting
            )
            try pipe.fileHandleForWriting.close()
            // Read until the download has data on disk, then go away like `head` does.
            #expect(try await waitUntil { fileSize(temp.file("f.bin.part")) > 1 << 20 })
            _ = pipe.fileHandleForReading.availableData
            try pipe.fileHandleForReading.close()
            let ended = await child.finish()
            #expect(ended.status == 141, "\(ended.stderr)")
            #expect(ended.stderr.isEmpty)
            let store = try Store(path: home + "/haul.sqlite")
            let task = try #require(try await store.allTasks().first)
            #expect(task.state != .running)
            let committed = try await store.segments(of: task.id).reduce(0) { $0 + $1.committed - $1.start }
            #expect(committed > 0)

            server.release("/f.bin")
            let before = server.requests(for: "/f.bin").count
            let rerun = try await HaulProcess.run(
                ["get", "-q", server.url("/f.bin").absoluteString],
                home: home,
                directory: temp.path
            )
            #expect(rerun.status == 0, "\(rerun.stderr)")
            #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"))
            #expect(
                server.requests(for: "/f.bin").dropFirst(before).first?.header("Range") == resumeRange(from: committed)
            )
        }
    }

    @Test("a port out of range fails at once with the reason")
    func portOutOfRange() async throws {
        let temp = try TemporaryDirectory()
        let result = try await HaulProcess.run(
            ["get", "http://127.0.0.1:99999/x"],
            home: temp.file("home"),
            directory: temp.path
        )
        #expect(result.status == 2)
        #expect(
            result.stderr
                == "haul: error: Invalid URL 'http://127.0.0.1:99999/x': port 99999 is not between 1 and 65535. Give a full http:// or https:// URL\n"
        )
    }

    @Test(
        "a malformed option value is one line naming the option and the expected form",
        arguments: [
            (["--limit-rate", "abc"], "--limit-rate takes a rate such as 500K or 10M"),
            (["-x", "-1"], "--connections takes a whole number from 1 to 64"),
            (["--timeout", "abc"], "--timeout takes a number of seconds"),
            (["-x", "100"], "--connections takes a whole number from 1 to 64"),
        ]
    )
    func malformedOptionValues(arguments: [String], form: String) async throws {
        let temp = try TemporaryDirectory()
        let result = try await HaulProcess.run(["get"] + arguments + ["http://127.0.0.1:1/x"], home: temp.file("home"))
        #expect(result.status == 2)
        #expect(result.stderr.hasPrefix("haul: error: "))
        #expect(result.stderr.filter { $0 == "\n" }.count == 1, "\(result.stderr)")
        #expect(result.stderr.contains(form), "\(result.stderr)")
    }
}

/// Issue 32's hostile values, each once refused badly or not at all.
@Suite("haul: values an attacker or a typo gives", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct HostileValueTests {
    @Test("an IPv4-mapped IPv6 address is fetched like its IPv4 address, not left waiting for a route")
    func mappedAddress() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 100_000, seed: 3))
            let url = "http://[::ffff:127.0.0.1]:\(server.port)/f.bin"
            let result = try await HaulProcess.run(
                ["get", "-q", "--wait-for-network", "5s", "-d", temp.path, url],
                home: temp.file("home")
            )
            #expect(result.status == 0, "\(result.stderr)")
            #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"))
            #expect(server.requests(for: "/f.bin").count == 1)
        }
        #expect(NetworkMonitor.route(to: "[::ffff:127.0.0.1]")?.interface == "lo")
    }

    @Test("-c through a symbolic link replaces the link with the jar; the file it pointed to is untouched")
    func cookieJarSymlink() async throws {
        let temp = try TemporaryDirectory()
        let target = temp.file("someone-elses.txt")
        try "original\n".write(toFile: target, atomically: true, encoding: .utf8)
        chmod(target, 0o644)
        let jar = temp.file("jar.txt")
        try FileManager.default.createSymbolicLink(atPath: jar, withDestinationPath: target)
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 10_000))
            let result = try await HaulProcess.run(
                ["get", "-q", "-c", jar, "-d", temp.path, server.url("/f.bin").absoluteString],
                home: temp.file("home")
            )
            #expect(result.status == 0, "\(result.stderr)")
        }
        #expect(try String(contentsOfFile: target, encoding: .utf8) == "original\n")
        #expect(try FileManager.default.attributesOfItem(atPath: target)[.posixPermissions] as? Int == 0o644)
        let saved = try FileManager.default.attributesOfItem(atPath: jar)
        #expect(saved[.type] as? FileAttributeType == .typeRegular)
        #expect(saved[.posixPermissions] as? Int == 0o600)
        #expect(try String(contentsOfFile: jar, encoding: .utf8).hasPrefix("# Netscape HTTP Cookie File"))
    }

    @Test("a server-chosen name of 300 bytes is shortened to fit beside its part file, keeping its extension")
    func longServerName() async throws {
        let temp = try TemporaryDirectory()
        let long = String(repeating: "ü", count: 150) + ".iso"
        try await TestServer.withServer { server in
            server.set("/f", .init(size: 50_000, seed: 8, contentDisposition: "attachment; filename=\"\(long)\""))
            let result = try await HaulProcess.run(
                ["get", "-q", "-d", temp.path, server.url("/f").absoluteString],
                home: temp.file("home")
            )
            #expect(result.status == 0, "\(result.stderr)")
            let names = try FileManager.default.contentsOfDirectory(atPath: temp.path).filter { $0.hasSuffix(".iso") }
            #expect(names.count == 1)
            let name = try #require(names.first)
            #expect(name.utf8.count <= 213 && name.hasPrefix("üü") && name.hasSuffix("ü.iso"), "\(name)")
            #expect(sha256(file: temp.file(name)) == server.sha256("/f"))
        }
    }

    @Test(
        "HAUL_HOME that is a regular file: one sentence from every command, no library dump, no crash",
        arguments: [["get", "http://127.0.0.1:9/x"], ["daemon"], ["add", "http://127.0.0.1:9/x"], ["list"]]
    )
    func homeIsAFile(command: [String]) async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        try "not a directory\n".write(toFile: home, atomically: true, encoding: .utf8)
        let result = try await HaulProcess.run(command, home: home)
        #expect(result.status != 0)
        #expect(
            result.stderr == "haul: error: The Haul home \(home) is not a directory. "
                + "Point HAUL_HOME at a directory you can write, or move what is in the way\n",
            "\(result.stderr)"
        )
    }

    @Test("--checkpoint-interval out of range is refused in a sentence", arguments: ["inf", "nan", "1e19", "0", "-1"])
    func checkpointInterval(value: String) async throws {
        let temp = try TemporaryDirectory()
        let result = try await HaulProcess.run(
            ["daemon", "--foreground", "--checkpoint-interval=\(value)"],
            home: temp.file("home")
        )
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("--checkpoint-interval must be from 0.01 to 3600 seconds"), "\(result.stderr)")
        #expect(result.stderr.split(separator: "\n").count == 1, "\(result.stderr)")
    }

    @Test(
        "HAUL_RPC_SECRET goes through the same check as --rpc-secret; empty means unset",
        arguments: ["a", "short", "  padded  "]
    )
    func weakRPCSecret(secret: String) async throws {
        let temp = try TemporaryDirectory()
        let result = try await HaulProcess(
            ["daemon", "--foreground"],
            home: temp.file("home"),
            environment: ["HAUL_RPC_SECRET": secret]
        ).finish()
        #expect(result.status == 2, "\(result.stderr)")
        #expect(result.stderr.contains("HAUL_RPC_SECRET must be 8 to 1024 characters"), "\(result.stderr)")
        let flag = try await HaulProcess.run(
            ["daemon", "--foreground", "--rpc-secret", secret],
            home: temp.file("home")
        )
        #expect(flag.status == 2)
        #expect(flag.stderr.contains("--rpc-secret must be 8 to 1024 characters"), "\(flag.stderr)")
        #expect(throws: HaulError.self) { try RPCSecret.checked(secret, from: "the secret") }
        #expect(try RPCSecret.checked("", from: "the secret") == nil)
        #expect(try RPCSecret.checked(nil, from: "the secret") == nil)
        #expect(try RPCSecret.checked("a long secret", from: "the secret") == "a long secret")
    }
}

/// `--lowest-speed-limit` and `--lowest-speed-time`: a connection that keeps under the floor
/// is broken and tried again like a timeout; its retries run out though each try writes bytes.
@Suite("Lowest speed", .tags(.process), .timeLimit(.minutes(10)))
struct LowestSpeedTests {
    @Test("the floor over a window: under it for a whole window is too slow; above it starts the next window")
    func window() throws {
        let start = Duration.seconds(100)
        var floor = SpeedFloor(try LowestSpeed(bytesPerSecond: 1000, time: .seconds(10)), start: start)
        let early = floor.record(1, at: start + .seconds(5))
        #expect(!early, "not a whole window yet")
        let slow = floor.record(1, at: start + .seconds(10))
        #expect(slow, "2 bytes in 10 s, under 1000/s")
        var fast = SpeedFloor(try LowestSpeed(bytesPerSecond: 1000, time: .seconds(10)), start: start)
        let quick = fast.record(20_000, at: start + .seconds(10))
        let next = fast.record(5, at: start + .seconds(15))
        let after = fast.record(5, at: start + .seconds(20))
        #expect(!quick && !next, "a new window began at 10 s")
        #expect(after)
        #expect(throws: HaulError.self) { try LowestSpeed(bytesPerSecond: 0) }
        #expect(throws: HaulError.self) { try LowestSpeed(bytesPerSecond: 1, time: .milliseconds(10)) }
    }

    @Test("a server that trickles is given up after the retries, saying why; without the floor it is waited on")
    func trickleGivenUp() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            // 2,000 bytes a second: never silent for --timeout, far under the floor.
            server.set("/slow.bin", .init(size: 1 << 20, seed: 2, bytesPerSecond: 2_000))
            let result = try await HaulProcess.run(
                [
                    "get", "--retries", "1", "--lowest-speed-limit", "10K", "--lowest-speed-time", "1", "-d", temp.path,
                    server.url("/slow.bin").absoluteString,
                ],
                home: temp.file("home")
            )
            #expect(result.status != 0, "\(result.stderr)")
            #expect(
                result.stderr.contains(
                    "Too slow: 127.0.0.1 sent less than 10240 bytes per second for 1 s (--lowest-speed-limit)"
                ),
                "\(result.stderr)"
            )
            // One retry, of the connection and of the download (as for any failure; a loaded
            // machine's connection may break once more on its own): a handful of requests,
            // never the endless ones a trickle's bytes would buy if they counted as progress.
            #expect(
                (2...8).contains(server.requests(for: "/slow.bin").count),
                "\(server.requests(for: "/slow.bin").count)"
            )
            #expect(result.stderr.contains("Gave up after 1 retry; ") && !result.stderr.contains("retry; gave up"))
            #expect(!FileManager.default.fileExists(atPath: temp.file("slow.bin")))
        }
        let refused = try await HaulProcess.run(
            ["get", "--lowest-speed-time", "5", "http://127.0.0.1:9/x"],
            home: temp.file("home")
        )
        #expect(refused.status == 2)
        #expect(refused.stderr.contains("--lowest-speed-time goes with --lowest-speed-limit"), "\(refused.stderr)")
    }
}
