import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// `haul get -o - URL`: the body on stdout, as `curl URL` and `wget -O - URL` write it.
@Suite("haul get -o - (stdout)", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct StdoutStreamTests {
    /// Runs `haul get ARGUMENTS` in `temp` with stdout into `temp/out`.
    static func get(_ arguments: [String], in temp: TemporaryDirectory) async throws -> (status: Int32, stderr: String)
    {
        _ = FileManager.default.createFile(atPath: temp.file("out"), contents: nil)
        let stdout = try #require(FileHandle(forWritingAtPath: temp.file("out")))
        defer { try? stdout.close() }
        let result = try await HaulProcess(
            ["get"] + arguments,
            home: temp.file("home"),
            directory: temp.path,
            stdout: stdout,
            environment: HaulProcess.networkVariables
        ).finish()
        return (result.status, result.stderr)
    }

    @Test("the body goes to stdout byte for byte, over one connection, with no part file and no store")
    func streamsToStdout() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 3_000_000))
            server.set("/start", .redirect(to: "/a.bin"))
            let result = try await Self.get(
                ["-o", "-", "-x", "4", "-H", "X-Test: yes", server.url("/start").absoluteString],
                in: temp
            )
            #expect(result.status == 0, "\(result.stderr)")
            #expect(sha256(file: temp.file("out")) == server.sha256("/a.bin"))
            #expect(result.stderr.contains("Wrote 2.86 MiB to stdout"), "\(result.stderr)")
            let requests = server.requests(for: "/a.bin")
            #expect(requests.count == 1, "one connection, whatever -x says")
            #expect(requests.first?.header("Range") == nil)
            #expect(requests.first?.header("X-Test") == "yes", "the headers go with it, past the redirect")
            #expect(requests.first?.header("Accept-Encoding") == "identity")
            let left = try FileManager.default.contentsOfDirectory(atPath: temp.path).sorted()
            #expect(left == ["out"], "no part file, no file named '-', and no store: \(left)")
        }
    }

    @Test("a failure before the first byte is retried; an HTTP error or a bad checksum says so with its exit status")
    func failuresBeforeAndAfter() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/busy.bin", .init(size: 200_000, failFirst: 1, retryAfter: "0"))
            let busy = try await Self.get(["-o", "-", server.url("/busy.bin").absoluteString], in: temp)
            #expect(busy.status == 0, "\(busy.stderr)")
            #expect(busy.stderr.contains("retrying in"), "\(busy.stderr)")
            #expect(server.requests(for: "/busy.bin").count == 2)
            #expect(sha256(file: temp.file("out")) == server.sha256("/busy.bin"))

            let missing = try await Self.get(["-o", "-", server.url("/missing").absoluteString], in: temp)
            #expect(missing.status == 6)
            #expect(try Data(contentsOf: URL(fileURLWithPath: temp.file("out"))).isEmpty)

            server.set("/a.bin", .init(size: 200_000))
            let wrong = String(repeating: "0", count: 64)
            let mismatch = try await Self.get(
                ["-o", "-", "--checksum", "sha256=\(wrong)", server.url("/a.bin").absoluteString],
                in: temp
            )
            #expect(mismatch.status == 7)
            #expect(mismatch.stderr.contains("Checksum mismatch"), "\(mismatch.stderr)")
            #expect(mismatch.stderr.contains("already written to the output"))
            // Every byte went out before the end could be checked.
            #expect(sha256(file: temp.file("out")) == server.sha256("/a.bin"))
        }
    }

    @Test("a stream cut short fails with how far it got and is not resumed; nothing claims the file is whole")
    func cutShort() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 300_000, cutAfter: 100_000))
            let result = try await Self.get(["-o", "-", server.url("/a.bin").absoluteString], in: temp)
            #expect(result.status == 4, "\(result.stderr)")
            let written = try Data(contentsOf: URL(fileURLWithPath: temp.file("out")))
            #expect(written.count > 0 && written.count <= 100_000)
            #expect(result.stderr.contains("broke after \(written.count) of 300000 bytes"), "\(result.stderr)")
            #expect(result.stderr.contains("the connection closed early"), "\(result.stderr)")
            #expect(!result.stderr.contains("Wrote"))
            #expect(server.requests(for: "/a.bin").count == 1, "a stream is never resumed")
            #expect(
                TestContent.sha256(written) == TestContent.sha256(server.content("/a.bin").prefix(written.count)),
                "what was written is the file's beginning"
            )
        }
    }

    @Test("a reader that leaves ends the command quietly with 141, as SIGPIPE would")
    func readerLeaves() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 2_000_000))
            let pipe = Pipe()
            try pipe.fileHandleForReading.close()
            let process = try HaulProcess(
                ["get", "-o", "-", server.url("/a.bin").absoluteString],
                home: temp.file("home"),
                directory: temp.path,
                stdout: pipe.fileHandleForWriting,
                environment: HaulProcess.networkVariables
            )
            try pipe.fileHandleForWriting.close()
            let result = await process.finish()
            #expect(result.status == 141)
            #expect(!result.stderr.contains("error"), "\(result.stderr)")
        }
    }

    @Test(arguments: [
        (["get", "--json", "-o", "-", "http://127.0.0.1:1/x"], "--json cannot go with -o -"),
        (["add", "-o", "-", "http://127.0.0.1:1/x"], "use haul get -o -"),
    ])
    func refusedCombinations(arguments: [String], message: String) async throws {
        let temp = try TemporaryDirectory()
        let result = try await HaulProcess.run(arguments, home: temp.file("home"), directory: temp.path)
        #expect(result.status == 2)
        #expect(result.stderr.contains(message), "\(result.stderr)")
        #expect(!FileManager.default.fileExists(atPath: temp.file("home")), "nothing started, nothing made")
    }
}
