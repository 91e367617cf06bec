import AsyncHTTPClient
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import NIOCore
import NIOHTTP1
import Testing

/// Hostile bodies for the daemon's API: nothing reaches a trap, a rejected request changes
/// nothing, and the daemon keeps answering.
@Suite("Daemon API: hostile input", .postgresServer, .timeLimit(.minutes(10)))
struct APIHardeningTests {
    /// A daemon's own settings: on PostgreSQL (a fleet of one, node "test") they name the
    /// node and carry the fleet's caps (none set), which are checked here and left out.
    static func own(_ settings: API.Settings, _ engine: StoreEngine) -> API.Settings {
        #expect(settings.node == (engine == .postgres ? "test" : nil))
        #expect(settings.fleet == (engine == .postgres ? API.FleetCaps() : nil))
        var own = settings
        (own.node, own.fleet) = (nil, nil)
        return own
    }

    /// Sends `body` to the daemon's socket; returns the status and the answer's text.
    static func send(_ method: HTTPMethod, _ path: String, _ body: String, home: String) async throws -> (Int, String) {
        let (status, text, _) = try await exchange(method, path, body, home: home)
        return (status, text)
    }

    /// Like ``send``, with the answer's `Allow` header.
    static func exchange(
        _ method: HTTPMethod,
        _ path: String,
        _ body: String,
        home: String,
        headers: [(String, String)] = []
    ) async throws -> (Int, String, String?) {
        let socket = (home + "/daemon.sock").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
        var request = HTTPClientRequest(url: "http+unix://\(socket)/v1\(path)")
        request.method = method
        request.headers.add(name: "Content-Type", value: "application/json")
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        request.body = .bytes(ByteBuffer(string: body))
        // Bounded generously: the bound only turns a hang into a failure, and a 17 MiB body
        // through a debug build on two loaded cores has taken more than 10 s in CI.
        let response = try await HTTPClient.shared.execute(request, timeout: .seconds(90))
        let text = String(buffer: try await response.body.collect(upTo: 1 << 20))
        return (Int(response.status.code), text, response.headers.first(name: "Allow"))
    }

    @Test(
        "PUT /v1/settings with an out-of-range or mixed body: 400, nothing applied, the daemon still answers",
        arguments: StoreEngine.allCases,
        [
            #"{"overallRateLimit": 9223372036854775807}"#,
            #"{"maxConcurrentDownloads": 7, "overallRateLimit": -1}"#,
            #"{"maxConcurrentDownloads": 7, "maxDownloadsPerHost": 0}"#,
            #"{"maxConcurrentDownloads": 7, "maxConnectionsPerHost": 1001}"#,
            #"{"maxConcurrentDownloads": 0}"#,
            #"{"maxConcurrentDownloads": 7, "giveUpAfter": 0}"#,
            #"{"giveUpAfter": 99999999999}"#,
            #"{"allowMetered": false, "meteredInterfaces": ["wwan*", "bad name!"]}"#,
        ]
    )
    func settingsValidatedBeforeApplied(engine: StoreEngine, body: String) async throws {
        let temp = try TemporaryDirectory()
        try await withDaemon(on: engine, home: temp.file("home"), maxConcurrent: 3) { client, _ in
            let before = try await client.settings()
            let (status, text) = try await Self.send(.PUT, "/settings", body, home: temp.file("home"))
            #expect(status == 400, "\(text)")
            #expect(text.contains("\"error\""))
            #expect(try await client.settings() == before)
            #expect(before.maxConcurrentDownloads == 3)
        }
    }

    @Test(
        "limits set live outlive a restart; a start's own flag wins and is kept; a kept value out of range is ignored",
        arguments: StoreEngine.allCases
    )
    func settingsKept(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let defaults = API.Settings(
            maxConcurrentDownloads: 3,
            maxDownloadsPerHost: 8,
            maxConnectionsPerHost: 16,
            overallRateLimit: 0,
            giveUpAfter: 86400,
            allowMetered: true,
            meteredInterfaces: ["wwan*", "ppp*"],
            lowestSpeedLimit: 0,
            lowestSpeedTime: 30
        )
        let changed = API.Settings(
            maxConcurrentDownloads: 7,
            maxDownloadsPerHost: 2,
            maxConnectionsPerHost: 12,
            overallRateLimit: 5_000_000,
            giveUpAfter: 3600,
            allowMetered: false,
            meteredInterfaces: ["wwan*", "usb0"],
            lowestSpeedLimit: 1024,
            lowestSpeedTime: 20
        )
        try await withDaemon(on: engine, home: home, maxConcurrent: nil) { client, _ in
            let first = try await client.settings()
            #expect(Self.own(first, engine) == defaults)
            let answered = try await client.update(changed)
            #expect(Self.own(answered, engine) == changed)
        }
        try await withDaemon(on: engine, home: home, maxConcurrent: nil) { client, _ in
            let kept = try await client.settings()
            #expect(Self.own(kept, engine) == changed)
            let status = try await client.status()
            #expect(status.maxConcurrentDownloads == 7)
        }
        // A flag given at start wins over the kept value, and is kept itself.
        try await withDaemon(on: engine, home: home, maxConcurrent: 2) { client, _ in
            let given = try await client.settings()
            #expect(given.maxConcurrentDownloads == 2)
        }
        try await withDaemon(on: engine, home: home, maxConcurrent: nil) { client, _ in
            let kept = try await client.settings()
            #expect(
                Self.own(kept, engine)
                    == API.Settings(
                        maxConcurrentDownloads: 2,
                        maxDownloadsPerHost: 2,
                        maxConnectionsPerHost: 12,
                        overallRateLimit: 5_000_000,
                        giveUpAfter: 3600,
                        allowMetered: false,
                        meteredInterfaces: ["wwan*", "usb0"],
                        lowestSpeedLimit: 1024,
                        lowestSpeedTime: 20
                    )
            )
            // Removing the overall limit (0) is kept as well.
            _ = try await client.update(API.Settings(overallRateLimit: 0))
        }
        // A store edited by hand: the bad value is ignored, the good ones kept.
        try await engine.withDaemonStore(home: home) { store in
            try await store.saveLimits(StoredLimits(maxConcurrentDownloads: 0, maxDownloadsPerHost: 4))
        }
        try await withDaemon(on: engine, home: home, maxConcurrent: nil) { client, _ in
            let kept = try await client.settings()
            #expect(
                Self.own(kept, engine)
                    == API.Settings(
                        maxConcurrentDownloads: 3,
                        maxDownloadsPerHost: 4,
                        maxConnectionsPerHost: 12,
                        overallRateLimit: 0,
                        giveUpAfter: 3600,
                        allowMetered: false,
                        meteredInterfaces: ["wwan*", "usb0"],
                        lowestSpeedLimit: 1024,
                        lowestSpeedTime: 20
                    )
            )
        }
    }

    @Test("POST /v1/tasks with one good and one bad download adds neither", arguments: StoreEngine.allCases)
    func addIsAllOrNothing(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            server.set("/good", .init(size: 10_000))
            try await withDaemon(on: engine, home: temp.file("home")) { client, _ in
                let body = """
                    {"downloads": [
                        {"url": "\(server.url("/good"))", "directory": "\(out)"},
                        {"url": "\(server.url("/good"))", "directory": "\(out)/missing/dir"}
                    ]}
                    """
                let (status, text) = try await Self.send(.POST, "/tasks", body, home: temp.file("home"))
                #expect(status == 400)
                #expect(text.contains("downloads[1]"), "\(text)")
                #expect(try await client.tasks().isEmpty)
                #expect(server.requests(for: "/good").isEmpty)
                let (emptyStatus, _) = try await Self.send(
                    .POST,
                    "/tasks",
                    #"{"downloads": []}"#,
                    home: temp.file("home")
                )
                #expect(emptyStatus == 400)
            }
        }
    }

    @Test(
        "a header with CR/LF is refused by the API and the library; nothing is added",
        arguments: StoreEngine.allCases
    )
    func headerInjectionRefused(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            server.set("/f", .init(size: 10_000))
            try await withDaemon(on: engine, home: temp.file("home")) { client, _ in
                let body = """
                    {"downloads": [{"url": "\(server.url("/f"))", "directory": "\(out)",
                        "headers": [{"name": "X", "value": "a\\r\\nInjected: b"}]}]}
                    """
                let (status, text) = try await Self.send(.POST, "/tasks", body, home: temp.file("home"))
                #expect(status == 400)
                #expect(text.contains("Header 'X' holds a line break"), "\(text)")
                #expect(try await client.tasks().isEmpty)
            }
            try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("lib.sqlite"))) {
                downloader in
                for header in [
                    HTTPHeaderField(name: "X", value: "a\r\nB: c"), HTTPHeaderField(name: "Bad Name", value: "v"),
                ] {
                    await expectHaulError(.invalidArgument) {
                        _ = try await downloader.download(
                            DownloadRequest(url: server.url("/f"), destination: .directory(out), headers: [header])
                        )
                    }
                }
            }
            #expect(server.requests(for: "/f").isEmpty)
        }
    }

    @Test("a rate limit no Int64 can hold is refused, and the limiter never traps on the largest one")
    func hugeRates() async throws {
        #expect(RateLimiter(bytesPerSecond: .max).bytesPerSecond == RateLimiter.maxBytesPerSecond)
        #expect(throws: HaulError.self) { try DownloadRequest.validateRateLimit(.max) }
        #expect(throws: HaulError.self) { try DownloadRequest.validateRateLimit(0) }
        try DownloadRequest.validateRateLimit(RateLimiter.maxBytesPerSecond)
    }

    @Test(
        "an acknowledgement beyond the last event is refused, and later events stay visible",
        arguments: StoreEngine.allCases
    )
    func ackBeyondLastEvent(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let home = temp.file("home")
        try await TestServer.withServer { server in
            server.set("/a", .init(size: 10_000, seed: 1))
            server.set("/b", .init(size: 10_000, seed: 2))
            try await withDaemon(on: engine, home: home) { client, _ in
                let a = try await client.add([
                    DownloadRequest(url: server.url("/a"), destination: .directory(out), session: "s")
                ])
                #expect(try await waitUntil { try await client.info(a[0].id).state == .completed })
                let (status, text) = try await Self.send(
                    .POST,
                    "/sessions/s/ack",
                    #"{"through": 999999999}"#,
                    home: home
                )
                #expect(status == 400)
                #expect(text.contains("the last event is"), "\(text)")
                let b = try await client.add([
                    DownloadRequest(url: server.url("/b"), destination: .directory(out), session: "s")
                ])
                #expect(try await waitUntil { try await client.info(b[0].id).state == .completed })
                // The log is written in groups, a moment behind the task's state.
                let shown = try await waitUntil {
                    try await client.loggedEvents(session: "s").contains {
                        $0.kind == .completed && $0.taskID == b[0].id
                    }
                }
                #expect(shown, "later events are not hidden")
                let logged = try await client.loggedEvents(session: "s")
                #expect(logged.contains { $0.kind == .completed && $0.taskID == a[0].id }, "nothing was acknowledged")
            }
        }
    }

    @Test("a body over 16 MiB is 413 with a sentence; the daemon still answers")
    func bodyTooLarge() async throws {
        let temp = try TemporaryDirectory()
        try await withDaemon(home: temp.file("home")) { client, _ in
            let huge = "{\"downloads\": [\"" + String(repeating: "x", count: 17 << 20) + "\"]}"
            let (status, text) = try await Self.send(.POST, "/tasks", huge, home: temp.file("home"))
            #expect(status == 413)
            #expect(text.contains("larger than 16 MiB"), "\(text.prefix(300))")
            #expect(try await client.tasks().isEmpty)
            #expect(try await client.status().pid > 0)
        }
    }

    @Test(
        "a malformed body is a 400 naming the field and what was expected",
        arguments: [
            ("/tasks", #"{"downloads": [{"directory": "/tmp"}]}"#, "field 'downloads[0].url' is missing"),
            ("/settings", #"{"overallRateLimit": "fast"}"#, "field 'overallRateLimit' must be a whole number"),
            (
                "/settings", #"{"maxConcurrentDownloads": true}"#,
                "field 'maxConcurrentDownloads' must be a whole number"
            ),
            ("/settings", #"{"maxConcurrentDownloads": 1e99}"#, "a number in it does not fit in 64 bits"),
            ("/tasks", "not json", "it is not valid JSON"),
        ]
    )
    func malformedBodies(path: String, body: String, expected: String) async throws {
        let temp = try TemporaryDirectory()
        try await withDaemon(home: temp.file("home")) { client, _ in
            let (status, text) = try await Self.send(
                path == "/settings" ? .PUT : .POST,
                path,
                body,
                home: temp.file("home")
            )
            #expect(status == 400)
            #expect(text.contains(expected), "\(text)")
            #expect(!text.contains("DecodingError") && !text.contains("CodingKeys"), "\(text)")
        }
    }

    @Test(
        "unknown paths answer the API's JSON 404; known paths with another method 405 with Allow",
        arguments: StoreEngine.allCases
    )
    func unknownEndpoints(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        try await withDaemon(on: engine, home: home) { _, _ in
            let (missing, missingText, _) = try await Self.exchange(.GET, "/nothing/here", "", home: home)
            #expect(missing == 404)
            #expect(
                missingText.contains("\"code\":\"notFound\"")
                    && missingText.contains("No such endpoint: GET /v1/nothing/here")
            )
            let (wrong, wrongText, allow) = try await Self.exchange(.DELETE, "/settings", "", home: home)
            #expect(wrong == 405, "\(wrongText)")
            #expect(allow == "GET, PUT")
            #expect(wrongText.contains("/v1/settings does not take DELETE; it takes GET, PUT"), "\(wrongText)")
            let (pattern, _, patternAllow) = try await Self.exchange(.PUT, "/tasks/\(UUID())", "", home: home)
            #expect(pattern == 405)
            #expect(patternAllow == "GET")
            let (ok, _, _) = try await Self.exchange(.GET, "/settings", "", home: home)
            #expect(ok == 200)
        }
    }
}
