import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// Basic authentication and cookies against nginx: `auth_basic`, and a login redirect that
/// sets a cookie its target requires. Its access log shows the user and cookies it was sent.
@Suite("Credentials and cookies", .serialized, .tags(.process, .nginx), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct CredentialsTests {
    static let usable = ExternalServer.nginx != nil || ExternalServer.isCI
    static let secret = ExternalServer.basicPassword

    static func withServer(_ body: (ExternalServer, String) async throws -> Void) async throws {
        try await ExternalServer.with(try await ExternalServer.startNginx()) { server in
            let bytes = TestContent.bytes(count: 1 << 20, seed: 31)
            try Data(bytes).write(to: URL(fileURLWithPath: server.root + "/big.bin"))
            try await body(server, TestContent.sha256(bytes))
        }
    }

    /// The access log's user for requests of `path`.
    static func users(_ server: ExternalServer, _ path: String) -> [String] {
        server.accessLog().filter { $0[0] == path }.map { $0.count > 5 ? $0[5] : "" }
    }

    @Test(
        "user:password@ in the URL, -u, and a netrc file each authenticate; without, 401 at once; never shown",
        .enabled(if: usable)
    )
    func basicAuthentication() async throws {
        try await Self.withServer { server, digest in
            let plain = server.url("/auth/big.bin").absoluteString
            let withUser = "http://haul:\(Self.secret)@127.0.0.1:\(server.port)/auth/big.bin"
            let netrc = try TemporaryDirectory()
            try "machine 127.0.0.1\n  login haul\n  password \"\(Self.secret)\"\n".write(
                toFile: netrc.file(".netrc"),
                atomically: true,
                encoding: .utf8
            )
            chmod(netrc.file(".netrc"), 0o600)
            let cases: [(String, [String], [String: String?])] = [
                ("the URL", ["-o", "big.bin", withUser], [:]),
                ("-u", ["-u", "haul:\(Self.secret)", "-o", "big.bin", plain], [:]),
                ("--netrc-file", ["--netrc-file", netrc.file(".netrc"), "-o", "big.bin", plain], [:]),
                ("--netrc", ["--netrc", "-o", "big.bin", plain], ["HOME": netrc.path, "NETRC": nil]),
            ]
            for (name, arguments, environment) in cases {
                let temp = try TemporaryDirectory()
                let result = try await HaulProcess.get(["-v"] + arguments, in: temp, environment: environment)
                #expect(result.status == 0, "\(name): \(result.stderr)")
                #expect(sha256(file: temp.file("big.bin")) == digest, "\(name)")
                #expect(!result.stderr.contains(Self.secret), "\(name) shows the password")
                #expect(Self.users(server, "/auth/big.bin").last == "haul", "\(name)")
            }
            let without = try await HaulProcess.get([plain], in: try TemporaryDirectory())
            #expect(without.status == 6)
            #expect(without.stderr.contains("HTTP 401"), "\(without.stderr)")
            #expect(!without.stderr.contains("retrying"))
        }
    }

    @Test(
        "credentials are not sent to another host after a redirect; netrc's are, to the host it names",
        .enabled(if: usable)
    )
    func crossHostRedirect() async throws {
        try await Self.withServer { server, digest in
            let start = server.url("/to-localhost-auth").absoluteString
            let dropped = try await HaulProcess.get(["-u", "haul:\(Self.secret)", start], in: try TemporaryDirectory())
            #expect(dropped.status == 6)
            #expect(dropped.stderr.contains("HTTP 401"), "\(dropped.stderr)")
            #expect(Self.users(server, "/auth/big.bin").allSatisfy { $0 == "-" || $0.isEmpty })

            let netrc = try TemporaryDirectory()
            try "machine localhost login haul password \(Self.secret)\n".write(
                toFile: netrc.file("netrc"),
                atomically: true,
                encoding: .utf8
            )
            let temp = try TemporaryDirectory()
            let named = try await HaulProcess.get(["--netrc-file", netrc.file("netrc"), start], in: temp)
            #expect(named.status == 0, "\(named.stderr)")
            #expect(sha256(file: temp.file("big.bin")) == digest)
        }
    }

    @Test("a cookie set by a 302 goes with the request to its target; --no-cookies gets the 403", .enabled(if: usable))
    func cookieAcrossRedirect() async throws {
        try await Self.withServer { server, digest in
            let temp = try TemporaryDirectory()
            let result = try await HaulProcess.get([server.url("/login").absoluteString], in: temp)
            #expect(result.status == 0, "\(result.stderr)")
            #expect(sha256(file: temp.file("big.bin")) == digest)
            let cookies = server.accessLog().filter { $0[0] == "/private/big.bin" }.map { $0[6] }
            #expect(cookies == ["session=s3ssion"], "\(cookies)")

            let refused = try await HaulProcess.get(
                ["--no-cookies", server.url("/login").absoluteString],
                in: try TemporaryDirectory()
            )
            #expect(refused.status == 6)
            #expect(refused.stderr.contains("HTTP 403"), "\(refused.stderr)")
        }
    }

    @Test(
        "-b loads a Netscape cookie file or NAME=VALUE; -c saves the jar (mode 0600) in the shared format",
        .enabled(if: usable)
    )
    func cookieFiles() async throws {
        try await Self.withServer { server, digest in
            let files = try TemporaryDirectory()
            let cookieFile = files.file("cookies.txt")
            try "# Netscape HTTP Cookie File\n127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\ts3ssion\n".write(
                toFile: cookieFile,
                atomically: true,
                encoding: .utf8
            )
            let target = server.url("/private/big.bin").absoluteString
            for given in [cookieFile, "session=s3ssion"] {
                let temp = try TemporaryDirectory()
                let result = try await HaulProcess.get(["-b", given, target], in: temp)
                #expect(result.status == 0, "\(given): \(result.stderr)")
                #expect(sha256(file: temp.file("big.bin")) == digest)
            }
            let jar = files.file("jar.txt")
            let saved = try await HaulProcess.get(
                ["-c", jar, server.url("/login").absoluteString],
                in: try TemporaryDirectory()
            )
            #expect(saved.status == 0, "\(saved.stderr)")
            let text = try String(contentsOfFile: jar, encoding: .utf8)
            #expect(text.hasPrefix("# Netscape HTTP Cookie File"))
            #expect(text.contains("127.0.0.1\tFALSE\t/\tFALSE\t0\tsession\ts3ssion\n"), "\(text)")
            let mode = try FileManager.default.attributesOfItem(atPath: jar)[.posixPermissions] as? Int
            #expect(mode == 0o600)
            // The saved jar works as a cookie file.
            let reused = try await HaulProcess.get(["-b", jar, target], in: try TemporaryDirectory())
            #expect(reused.status == 0, "\(reused.stderr)")
        }
    }

    @Test("haul add -u: the daemon authenticates; the password is in no output, answer or log", .enabled(if: usable))
    func daemonCredentials() async throws {
        try await Self.withServer { server, digest in
            let temp = try TemporaryDirectory()
            let home = temp.file("home")
            let out = try temp.directory("out")
            let added = try await HaulProcess.run(
                ["add", "-u", "haul:\(Self.secret)", "-d", out, server.url("/auth/big.bin").absoluteString],
                home: home
            )
            #expect(added.status == 0, "\(added.stderr)")
            let waited = try await HaulProcess.run(["wait"], home: home)
            #expect(waited.status == 0, "\(waited.stderr)")
            #expect(sha256(file: out + "/big.bin") == digest)
            let list = try await HaulProcess.run(["list", "--json"], home: home)
            let events = try await HaulProcess.run(["events", "--json", "--no-follow"], home: home)
            let log = (try? String(contentsOfFile: home + "/daemon.log", encoding: .utf8)) ?? ""
            for text in [added.stdout, added.stderr, waited.stdout, waited.stderr, list.stdout, events.stdout, log] {
                #expect(!text.contains(Self.secret))
            }
            // Kept where only the user can read it.
            let mode = try FileManager.default.attributesOfItem(atPath: home)[.posixPermissions] as? Int
            #expect(mode == 0o700)
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }
}

/// The netrc and cookie rules on their own.
@Suite("netrc and cookie rules", .timeLimit(.minutes(10)))
struct CredentialRulesTests {
    @Test("netrc: machines, the default, quoted tokens, macdef bodies skipped, first match wins")
    func netrc() {
        let text = """
            machine a.test login alice password "p w\\"x"
            macdef init
            machine evil.test login mallory password nope

            machine B.test
                login bob
                password bobs
                account ignored
            machine a.test login second password second
            default login anon password guest
            """
        let netrc = Netrc(parsing: text)
        #expect(netrc.entry(for: "a.test") == .init(login: "alice", password: "p w\"x"))
        #expect(netrc.entry(for: "b.test") == .init(login: "bob", password: "bobs"))
        #expect(netrc.entry(for: "evil.test") == .init(login: "anon", password: "guest"))
        #expect(netrc.entry(for: "other.test") == .init(login: "anon", password: "guest"))
    }

    @Test("Set-Cookie: domain, path, Secure, Max-Age and Expires decide what goes where")
    func cookieMatching() {
        let jar = CookieJar()
        let origin = URL(string: "http://www.example.test/dir/page")!
        jar.receive(
            [
                "a=1", "b=2; Domain=.example.test; Path=/", "c=3; Path=/dir/sub", "s=4; Secure; Path=/",
                "gone=5; Max-Age=0", "old=6; Expires=Wed, 21 Oct 2015 07:28:00 GMT", "evil=7; Domain=other.test",
                "tld=8; Domain=test",
            ],
            from: origin
        )
        #expect(jar.header(for: URL(string: "http://www.example.test/dir/x")!) == "a=1; b=2")
        #expect(jar.header(for: URL(string: "http://www.example.test/dir/sub/y")!) == "c=3; a=1; b=2")
        #expect(jar.header(for: URL(string: "https://www.example.test/")!) == "b=2; s=4")
        #expect(jar.header(for: URL(string: "http://api.example.test/")!) == "b=2")
        #expect(jar.header(for: URL(string: "http://other.test/")!) == nil)
        // A later Set-Cookie with the same name, domain and path replaces; Max-Age=0 deletes.
        jar.receive(["b=changed; Domain=example.test; Path=/"], from: origin)
        jar.receive(["a=; Max-Age=0"], from: origin)
        #expect(jar.header(for: URL(string: "http://www.example.test/dir/x")!) == "b=changed")
    }

    @Test("the Netscape format reads back what it wrote, HttpOnly and subdomains included")
    func netscapeRoundTrip() {
        let jar = CookieJar()
        jar.receive(
            ["h=1; HttpOnly; Path=/", "d=2; Domain=example.test; Max-Age=3600"],
            from: URL(string: "http://example.test/a")!
        )
        let text = jar.netscapeText()
        #expect(text.contains("#HttpOnly_example.test\tFALSE\t/\tFALSE\t0\th\t1\n"), "\(text)")
        let read = CookieJar(CookieJar.netscapeCookies(text))
        #expect(read.all.map(\.name).sorted() == ["d", "h"])
        #expect(read.header(for: URL(string: "http://sub.example.test/")!) == "d=2")
    }
}
