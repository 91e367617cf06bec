import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// Downloads through a real forwarding proxy (tinyproxy), which logs what it was asked and
/// marks what it forwards with `Via`: so the origin can tell proxied requests from direct ones.
@Suite("Proxies", .serialized, .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct ProxyTests {
    static let usable = TinyProxy.usable

    static func viaProxy(_ request: TestServer.RecordedRequest) -> Bool {
        request.header("Via")?.contains("tinyproxy") == true
    }

    @Test(
        "http:// through the proxy in absolute form, on every connection of a split download; its password never shown nor sent on",
        .enabled(if: usable)
    )
    func httpThroughProxy() async throws {
        try await TinyProxy.with(credentials: ("haul", "s3cret-pw")) { proxy in
            try await TestServer.withServer { server in
                server.set("/f.bin", .init(size: 12 << 20, seed: 5))
                let temp = try TemporaryDirectory()
                let url = server.url("/f.bin").absoluteString
                let result = try await HaulProcess.get(
                    [
                        "-v", "-x", "3", "--min-split", "1M", "--proxy", proxy.url(user: "haul", password: "s3cret-pw"),
                        url,
                    ],
                    in: temp
                )
                #expect(result.status == 0, "\(result.stderr)")
                #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"))
                let asked = proxy.requests()
                #expect(asked.count == server.requests(for: "/f.bin").count)
                #expect(asked.count >= 2, "\(asked)")
                #expect(asked.allSatisfy { $0 == "GET \(url) HTTP/1.1" }, "\(asked)")
                let seen = server.requests(for: "/f.bin")
                #expect(seen.allSatisfy(Self.viaProxy))
                #expect(seen.allSatisfy { $0.header("Proxy-Authorization") == nil })
                #expect(!result.stderr.contains("s3cret-pw"))
                #expect(result.stderr.contains("127.0.0.1:\(proxy.port)"), "the verbose log names the proxy")
            }
        }
    }

    @Test("https:// through the proxy with CONNECT, end to end encrypted", .enabled(if: usable && TLSTests.usable))
    func httpsThroughConnect() async throws {
        try await TinyProxy.with { proxy in
            try await TLSTests.withServer { server, pki, digest in
                let temp = try TemporaryDirectory()
                let result = try await HaulProcess.get(
                    ["--cacert", pki.caCertificate, "-o", "big.bin", server.url("/big.bin").absoluteString],
                    in: temp,
                    environment: ["https_proxy": proxy.url()]
                )
                #expect(result.status == 0, "\(result.stderr)")
                #expect(sha256(file: temp.file("big.bin")) == digest)
                #expect(proxy.requests() == ["CONNECT 127.0.0.1:\(server.port) HTTP/1.1"])
            }
        }
    }

    @Test(
        "the environment as curl reads it: http_proxy (not HTTP_PROXY), all_proxy, no_proxy with CIDR, --noproxy and --proxy '' over it",
        .enabled(if: usable)
    )
    func environmentRules() async throws {
        try await TinyProxy.with { proxy in
            try await TestServer.withServer { server in
                server.set("/f.bin", .init(size: 100_000, seed: 6))
                let url = server.url("/f.bin").absoluteString
                let cases: [(String, [String], [String: String?], Bool)] = [
                    ("HTTP_PROXY is ignored (httpoxy)", [], ["HTTP_PROXY": proxy.url()], false),
                    ("http_proxy", [], ["http_proxy": proxy.url()], true),
                    ("all_proxy", [], ["all_proxy": proxy.url()], true),
                    ("https_proxy is for https only", [], ["https_proxy": proxy.url()], false),
                    ("no_proxy CIDR", [], ["http_proxy": proxy.url(), "no_proxy": "example.test, 127.0.0.0/8"], false),
                    ("NO_PROXY host", [], ["http_proxy": proxy.url(), "NO_PROXY": "127.0.0.1"], false),
                    ("--noproxy '*'", ["--noproxy", "*"], ["http_proxy": proxy.url()], false),
                    ("--proxy ''", ["--proxy", ""], ["http_proxy": proxy.url()], false),
                    ("--proxy without a scheme", ["--proxy", "127.0.0.1:\(proxy.port)"], [:], true),
                ]
                for (name, flags, environment, proxied) in cases {
                    let temp = try TemporaryDirectory()
                    let before = server.requests(for: "/f.bin").count
                    let result = try await HaulProcess.get(flags + [url], in: temp, environment: environment)
                    #expect(result.status == 0, "\(name): \(result.stderr)")
                    #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"), "\(name)")
                    let request = try #require(server.requests(for: "/f.bin").dropFirst(before).first)
                    #expect(Self.viaProxy(request) == proxied, "\(name)")
                }
            }
        }
    }

    @Test(
        "a redirect between a proxied host and a bypassed one: each hop chooses its own way",
        .enabled(if: usable)
    )
    func redirectChoosesAfresh() async throws {
        try await TinyProxy.with { proxy in
            try await TestServer.withServer { server in
                server.set("/f.bin", .init(size: 200_000, seed: 7))
                // 127.0.0.1 goes through the proxy, localhost (the same server) does not.
                server.set("/to-direct", .redirect(to: "http://localhost:\(server.port)/f.bin"))
                server.set("/to-proxied", .redirect(to: "http://127.0.0.1:\(server.port)/f.bin"))
                let environment: [String: String?] = ["http_proxy": proxy.url(), "no_proxy": "localhost"]

                let first = try TemporaryDirectory()
                let out = try await HaulProcess.get(
                    [server.url("/to-direct").absoluteString],
                    in: first,
                    environment: environment
                )
                #expect(out.status == 0, "\(out.stderr)")
                #expect(sha256(file: first.file("f.bin")) == server.sha256("/f.bin"))
                #expect(server.requests(for: "/to-direct").allSatisfy(Self.viaProxy))
                #expect(server.requests(for: "/f.bin").allSatisfy { !Self.viaProxy($0) })

                let second = try TemporaryDirectory()
                let back = try await HaulProcess.get(
                    ["http://localhost:\(server.port)/to-proxied"],
                    in: second,
                    environment: environment
                )
                #expect(back.status == 0, "\(back.stderr)")
                #expect(sha256(file: second.file("f.bin")) == server.sha256("/f.bin"))
                #expect(server.requests(for: "/to-proxied").allSatisfy { !Self.viaProxy($0) })
                #expect(server.requests(for: "/f.bin").last.map(Self.viaProxy) == true)
                #expect(proxy.requests().filter { $0.contains("/f.bin") }.count == 1)
            }
        }
    }

    @Test(
        "a proxy that wants credentials: fails at once with a sentence naming it, the password never shown",
        .enabled(if: usable)
    )
    func proxyAuthentication() async throws {
        try await TinyProxy.with(credentials: ("haul", "right-pw")) { proxy in
            try await TestServer.withServer { server in
                server.set("/f.bin", .init(size: 100_000, seed: 8))
                let url = server.url("/f.bin").absoluteString
                let missing = try await HaulProcess.get(["--proxy", proxy.url(), url], in: try TemporaryDirectory())
                #expect(missing.status == 4)
                // A 407 is final, never retried. (tinyproxy under load may close a connection
                // without answering, which is retried, rightly: only what follows a 407 counts.)
                #expect(!Self.retried(after: "(HTTP 407)", in: missing.stderr), "\(missing.stderr)")
                #expect(
                    missing.stderr.contains(
                        "The proxy 127.0.0.1:\(proxy.port) refused the request for 127.0.0.1: it wants valid credentials (HTTP 407)"
                    ),
                    "\(missing.stderr)"
                )
                #expect(missing.stderr.contains("USER:PASSWORD before the host in --proxy"), "\(missing.stderr)")
                // tinyproxy answers wrong credentials with 401 (not 407): the hint names the proxy.
                let wrong = try await HaulProcess.get(
                    ["--proxy", proxy.url(user: "haul", password: "wrong-pw"), url],
                    in: try TemporaryDirectory()
                )
                #expect(wrong.status == 6)  // An HTTP status: 401 could be the origin's.
                #expect(!Self.retried(after: "401", in: wrong.stderr), "\(wrong.stderr)")
                #expect(wrong.stderr.contains("the proxy 127.0.0.1:\(proxy.port) may have answered"), "\(wrong.stderr)")
                for text in [missing.stderr, wrong.stderr] {
                    #expect(!text.contains("wrong-pw") && !text.contains("right-pw"))
                }
                #expect(server.requests(for: "/f.bin").isEmpty)
            }
        }
    }

    /// Whether `stderr` has a retry line whose reason contains `reason`.
    static func retried(after reason: String, in stderr: String) -> Bool {
        stderr.split(separator: "\n").contains { $0.contains("retrying") && $0.contains(reason) }
    }

    @Test("a proxy that is not running: the message says the proxy failed, and it is retried", .enabled(if: usable))
    func proxyDown() async throws {
        let temp = try TemporaryDirectory()
        let port = try LoopbackPort.free()
        let result = try await HaulProcess.get(
            ["--retries", "1", "--proxy", "http://127.0.0.1:\(port)", "http://files.example.test/f.bin"],
            in: temp
        )
        #expect(result.status == 4)
        #expect(
            result.stderr.contains("(1 of 1): the proxy failed: connection refused by 127.0.0.1:\(port)"),
            "\(result.stderr)"
        )
        #expect(result.stderr.contains("check the proxy"), "\(result.stderr)")
        #expect(result.stderr.contains("haul: error: The proxy failed: connection refused by"), "\(result.stderr)")
    }

    @Test(
        "an origin that goes silent behind the proxy: the forwarded request times out after --timeout, in words",
        .enabled(if: usable)
    )
    func forwardedReadTimeout() async throws {
        let silent = try FaultyListener(.silent)
        defer { silent.stop() }
        try await TinyProxy.with { proxy in
            let temp = try TemporaryDirectory()
            let started = ContinuousClock.now
            let result = try await HaulProcess.get(
                ["--timeout", "1", "--retries", "0", "--proxy", proxy.url(), "http://127.0.0.1:\(silent.port)/f.bin"],
                in: temp
            )
            #expect(result.status == 4)
            #expect(
                result.stderr.contains("Timed out: 127.0.0.1:\(silent.port) sent nothing for 1 s (--timeout)"),
                "\(result.stderr)"
            )
            #expect(ContinuousClock.now - started < .seconds(30), "tinyproxy's own timeout is 60 s")
            #expect(proxy.requests() == ["GET http://127.0.0.1:\(silent.port)/f.bin HTTP/1.1"])
        }
    }

    @Test(
        "socks5h:// and socks5://: the proxy is asked for the name, and connects",
        .enabled(if: ExternalServer.python != nil || ExternalServer.isCI)
    )
    func socks() async throws {
        let proxy = try await SOCKSProxy.start()
        defer { proxy.stop() }
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 2 << 20, seed: 10))
            for scheme in ["socks5h", "socks5"] {
                let temp = try TemporaryDirectory()
                let result = try await HaulProcess.get(
                    ["--proxy", "\(scheme)://127.0.0.1:\(proxy.port)", "http://localhost:\(server.port)/f.bin"],
                    in: temp
                )
                #expect(result.status == 0, "\(scheme): \(result.stderr)")
                #expect(sha256(file: temp.file("f.bin")) == server.sha256("/f.bin"))
            }
            #expect(proxy.targets().count == 2)
            #expect(proxy.targets().allSatisfy { $0 == "localhost:\(server.port)" }, "\(proxy.targets())")
        }
    }

    @Test(
        "haul add keeps the proxy its environment gave; the daemon, with none of its own, uses it",
        .enabled(if: usable)
    )
    func daemonKeepsProxy() async throws {
        try await TinyProxy.with(credentials: ("haul", "daemon-pw")) { proxy in
            try await TestServer.withServer { server in
                server.set("/f.bin", .init(size: 300_000, seed: 9))
                let temp = try TemporaryDirectory()
                let home = temp.file("home")
                let out = try temp.directory("out")
                let added = try await HaulProcess(
                    ["add", "-d", out, server.url("/f.bin").absoluteString],
                    home: home,
                    environment: ["http_proxy": proxy.url(user: "haul", password: "daemon-pw"), "no_proxy": nil]
                ).finish()
                #expect(added.status == 0, "\(added.stderr)")
                let waited = try await HaulProcess.run(["wait"], home: home)
                #expect(waited.status == 0, "\(waited.stderr)")
                #expect(sha256(file: out + "/f.bin") == server.sha256("/f.bin"))
                #expect(server.requests(for: "/f.bin").allSatisfy(Self.viaProxy))
                #expect(!proxy.requests().isEmpty)
                let list = try await HaulProcess.run(["list", "--json"], home: home)
                let log = (try? String(contentsOfFile: home + "/daemon.log", encoding: .utf8)) ?? ""
                for text in [added.stdout, added.stderr, waited.stdout, waited.stderr, list.stdout, log] {
                    #expect(!text.contains("daemon-pw"))
                }
                _ = try await HaulProcess.run(["daemon", "stop"], home: home)
            }
        }
    }
}

/// The proxy rules on their own: parsing, and which hosts `no_proxy` sends directly.
@Suite("Proxy rules", .timeLimit(.minutes(10)))
struct ProxyRulesTests {
    @Test("no_proxy: *, domains with and without a dot, IPv4 and IPv6 addresses and CIDR blocks")
    func noProxyMatching() {
        let settings = ProxySettings(
            all: "http://proxy:3128",
            noProxy: ["example.com", ".corp.test", "10.1.2.3", "192.168.0.0/16", "fd00::/8", "[::1]"]
        )
        let direct = [
            "example.com", "a.example.com", "corp.test", "x.y.corp.test", "10.1.2.3", "192.168.77.1", "fd12::1", "::1",
        ]
        let proxied = ["notexample.com", "example.com.evil", "10.1.2.4", "192.169.0.1", "fe80::1", "corp.testing"]
        for host in direct { #expect(settings.bypasses(host: host), "\(host)") }
        for host in proxied { #expect(!settings.bypasses(host: host), "\(host)") }
        #expect(ProxySettings(all: "p", noProxy: ["*"]).bypasses(host: "anything.example"))
    }

    @Test("the environment: lower case wins, HTTP_PROXY is never read, empty values are unset")
    func environment() {
        let settings = ProxySettings.fromEnvironment([
            "HTTP_PROXY": "http://evil:1", "https_proxy": "http://lower:2", "HTTPS_PROXY": "http://upper:3",
            "ALL_PROXY": "socks5h://all:4", "no_proxy": "", "NO_PROXY": "a.test, b.test",
        ])
        #expect(settings.http == nil)
        #expect(settings.https == "http://lower:2")
        #expect(settings.all == "socks5h://all:4")
        #expect(settings.noProxy == ["a.test", "b.test"])
    }

    @Test("proxy URLs: curl's defaults, and every unusable form refused in one sentence without its password")
    func parsing() throws {
        let bare = try ProxyEndpoint(parsing: "proxy.corp")
        #expect(bare.kind == .http && bare.host == "proxy.corp" && bare.port == 1080)
        let full = try ProxyEndpoint(parsing: "http://al%40ice:p%3Ass@[::1]:3128/")
        #expect(full.host == "::1" && full.port == 3128 && full.username == "al@ice" && full.password == "p:ss")
        #expect(try ProxyEndpoint(parsing: "socks5h://127.0.0.1:9050").kind == .socks5)
        for bad in [
            "https://user:hunter2@proxy:443", "ftp://proxy", "http://proxy:0", "http://proxy/path",
            "socks5://u:hunter2@p",
            "http://", "proxy with spaces",
        ] {
            let error = #expect(throws: HaulError.self) { try ProxyEndpoint(parsing: bad) }
            #expect(error?.code == .invalidArgument)
            #expect(error?.description.contains("hunter2") == false, "\(error?.description ?? "")")
        }
        #expect(throws: HaulError.self) { try ProxySettings(noProxy: ["not a host!"]).validate() }
    }
}
