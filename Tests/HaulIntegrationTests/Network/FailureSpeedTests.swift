import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// Network failures are named, fast when permanent, and announced when retried: `haul get`
/// of a refused port, an unknown host, a reset and a silent address, as a user runs it.
@Suite("Failures that say what happened, fast", .serialized, .tags(.process), .timeLimit(.minutes(10)))
struct FailureSpeedTests {
    /// Text no message may hold: library types, build paths.
    static let dumps = [
        "NIOConnectionError", "IOError", "HTTPClientError", "NIOSSL", "BoringSSL", "checkouts", ".swift",
    ]

    static func expectNoDumps(_ text: String, sourceLocation: SourceLocation = #_sourceLocation) {
        for dump in dumps {
            #expect(!text.contains(dump), "\(dump) in: \(text)", sourceLocation: sourceLocation)
        }
    }

    @Test("a refused port: five retries, each announced with its reason, then exit 1 within 30 s")
    func refusedPort() async throws {
        let temp = try TemporaryDirectory()
        // Held for the whole test: a port only free a moment ago was once taken by another
        // test's server during the retries (a 404 instead of a refusal).
        let refusing = try RefusingPort()
        let port = refusing.port
        let started = ContinuousClock.now
        let (status, _, stderr) = try await HaulProcess.run(
            ["get", "http://127.0.0.1:\(port)/x.bin"],
            home: temp.file("home"),
            directory: temp.path
        )
        let elapsed = ContinuousClock.now - started
        #expect(status == 4)
        #expect(elapsed < .seconds(30), "took \(elapsed)")
        let retries = stderr.split(separator: "\n").filter { $0.hasPrefix("haul: retrying in ") }
        #expect(retries.count == 5, "\(stderr)")
        for (index, line) in retries.enumerated() {
            #expect(line.contains("(\(index + 1) of 5): connection refused by 127.0.0.1:\(port)"), "\(line)")
        }
        #expect(stderr.contains("haul: error: Connection refused by 127.0.0.1:\(port)"), "\(stderr)")
        #expect(stderr.contains("Gave up after 5 retries; check the URL's port, and that the server is running"))
        for line in stderr.split(separator: "\n") where line.hasPrefix("haul:") {
            #expect(line.filter { $0 == "(" }.count == line.filter { $0 == ")" }.count, "unbalanced: \(line)")
        }
        Self.expectNoDumps(stderr)
        withExtendedLifetime(refusing) {}
        #expect(try FileManager.default.contentsOfDirectory(atPath: temp.path) == ["home"])
    }

    @Test("a connection reset after the request: named as a reset and retried")
    func resetConnection() async throws {
        let temp = try TemporaryDirectory()
        let listener = try FaultyListener(.reset)
        defer { listener.stop() }
        let (status, _, stderr) = try await HaulProcess.run(
            ["get", "--retries", "1", "http://127.0.0.1:\(listener.port)/x.bin"],
            home: temp.file("home"),
            directory: temp.path
        )
        #expect(status == 4)
        #expect(stderr.contains("(1 of 1): connection reset by 127.0.0.1:\(listener.port)"), "\(stderr)")
        #expect(stderr.contains("haul: error: Connection reset by 127.0.0.1:\(listener.port)"), "\(stderr)")
        // Its thread counts a reset just after closing the socket: wait for the second count.
        #expect(try await waitUntil(timeout: .seconds(10)) { listener.resets >= 2 })
        #expect(listener.resets == 2)
        Self.expectNoDumps(stderr)
    }

    @Test("an address that never answers: --connect-timeout bounds each attempt, and the message says so")
    func connectTimeout() async throws {
        let temp = try TemporaryDirectory()
        let listener = try FaultyListener(.blackhole)
        defer { listener.stop() }
        let started = ContinuousClock.now
        let (status, _, stderr) = try await HaulProcess.run(
            ["get", "--connect-timeout", "1", "--retries", "1", "http://127.0.0.1:\(listener.port)/x.bin"],
            home: temp.file("home"),
            directory: temp.path
        )
        let elapsed = ContinuousClock.now - started
        #expect(status == 4)
        // Two attempts of one second and a backoff of at most one: nowhere near the 30 s default.
        #expect(elapsed < .seconds(40), "took \(elapsed)")
        #expect(
            stderr.contains(
                "haul: error: Timed out connecting to 127.0.0.1:\(listener.port) after 1 s (--connect-timeout)"
            ),
            "\(stderr)"
        )
        #expect(stderr.contains("(1 of 1): timed out connecting"), "\(stderr)")
        Self.expectNoDumps(stderr)
    }
}

/// Name lookups answered by a name server of the test's own: `haul` runs in a private mount
/// namespace where /etc/resolv.conf names it (root only: in CI a missing privilege fails).
@Suite("Name lookups", .serialized, .tags(.process), .timeLimit(.minutes(10)))
struct NameLookupTests {
    static let usable = LocalNameServer.isPossible || ExternalServer.isCI

    @Test(
        "a host the name server says does not exist: fails at once, no retries, says which host",
        .enabled(if: usable)
    )
    func unknownHost() async throws {
        let temp = try TemporaryDirectory()
        let server = try await LocalNameServer.start()
        defer { server.stop() }
        let started = ContinuousClock.now
        let (status, _, stderr) = try await HaulProcess(
            ["get", "http://files.haul-test.invalid/x.bin"],
            home: temp.file("home"),
            directory: temp.path,
            launcher: server.launcher
        ).finish()
        let elapsed = ContinuousClock.now - started
        #expect(status == 4)
        #expect(elapsed < .seconds(30), "took \(elapsed)")  // Generous: at once, on a loaded machine.
        #expect(!stderr.contains("retrying"), "\(stderr)")
        #expect(
            stderr.contains(
                "haul: error: The host files.haul-test.invalid does not exist: the name server has no address for it (http://files.haul-test.invalid"
            ),
            "\(stderr)"
        )
        #expect(stderr.contains("Check the host name in the URL"))
        #expect(server.queries().contains("files.haul-test.invalid"))
        FailureSpeedTests.expectNoDumps(stderr)
    }

    @Test("no name server answers: that is retried, and said as such", .enabled(if: usable))
    func nameServerDown() async throws {
        let temp = try TemporaryDirectory()
        let server = try await LocalNameServer.start()
        server.stop()  // resolv.conf still names it: lookups are refused.
        let (status, _, stderr) = try await HaulProcess(
            ["get", "--retries", "2", "http://files.haul-test.invalid/x.bin"],
            home: temp.file("home"),
            directory: temp.path,
            launcher: server.launcher
        ).finish()
        #expect(status == 4)
        #expect(
            stderr.contains("(2 of 2): cannot look up files.haul-test.invalid: no name server answered"),
            "\(stderr)"
        )
        #expect(stderr.contains("check the network connection"), "\(stderr)")
        FailureSpeedTests.expectNoDumps(stderr)
    }
}

/// A name server on a loopback address of its own, port 53, that answers every question
/// "no such name" (NXDOMAIN) and records it; with ``launcher``, a command sees it as the
/// machine's only name server (a private mount namespace with its own /etc/resolv.conf).
final class LocalNameServer: Sendable {
    let address: String
    let directory: TemporaryDirectory
    private let process: ChildProcess

    static var isPossible: Bool {
        getuid() == 0 && ExternalServer.python != nil && ExternalServer.findExecutable("unshare") != nil
    }

    private init(address: String, directory: TemporaryDirectory, process: ChildProcess) {
        self.address = address
        self.directory = directory
        self.process = process
    }

    static func start() async throws -> LocalNameServer {
        try #require(getuid() == 0, "binding port 53 and a mount namespace need root")
        let python = try #require(ExternalServer.python, "python3 is not installed")
        let directory = try TemporaryDirectory()
        let address = "127.53.\(Int.random(in: 1...254)).\(Int.random(in: 1...254))"
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.bind((sys.argv[1], 53))
            log = open(sys.argv[2], "a")
            open(sys.argv[3], "w").close()
            while True:
                data, peer = s.recvfrom(4096)
                if len(data) < 12:
                    continue
                at, labels = 12, []
                while at < len(data) and data[at] != 0:
                    labels.append(data[at + 1:at + 1 + data[at]].decode("ascii", "replace"))
                    at += 1 + data[at]
                question = data[12:at + 5]
                log.write(".".join(labels) + "\\n")
                log.flush()
                flags = 0x8000 | (data[2] & 0x79) << 8 | 0x80 | 3  # a response, RD kept, RA, NXDOMAIN
                s.sendto(data[:2] + flags.to_bytes(2, "big") + b"\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00" + question, peer)
            """
        try script.write(toFile: directory.file("dns.py"), atomically: true, encoding: .utf8)
        try "nameserver \(address)\noptions attempts:1 timeout:1\n".write(
            toFile: directory.file("resolv.conf"),
            atomically: true,
            encoding: .utf8
        )
        let process = try ChildProcess(
            python,
            arguments: [directory.file("dns.py"), address, directory.file("queries"), directory.file("ready")],
            standardOutput: .null,
            standardError: .null
        )
        let server = LocalNameServer(address: address, directory: directory, process: process)
        for _ in 0..<500 where !FileManager.default.fileExists(atPath: directory.file("ready")) {
            guard process.isRunning else { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        try #require(FileManager.default.fileExists(atPath: directory.file("ready")), "the name server did not start")
        return server
    }

    /// Runs a command with this server as the only name server it sees.
    var launcher: [String] {
        [
            ExternalServer.findExecutable("unshare") ?? "/usr/bin/unshare", "--mount", "--", "/bin/sh", "-c",
            "mount --bind \(directory.file("resolv.conf")) /etc/resolv.conf && exec \"$0\" \"$@\"",
        ]
    }

    /// The names asked so far.
    func queries() -> [String] {
        let text = (try? String(contentsOfFile: directory.file("queries"), encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }

    func stop() {
        process.signal(SIGTERM)
        process.waitUntilExit()
    }
}
