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
            #expect(first == defaults)
            let answered = try await client.update(changed)
            #expect(answered == changed)
        }
        try await withDaemon(on: engine, home: home, maxConcurrent: nil) { client, _ in
            let kept = try await client.settings()
            #expect(kept == changed)
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
                kept
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
                kept
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

    /// One hostile request and the status it must get.
    struct BadRequest: CustomStringConvertible, Sendable {
        var method: HTTPMethod
        var path: String
        var body = ""
        var headers: [(String, String)] = []
        var status = 400

        var description: String { "\(method) \(path) \(body.prefix(120))" }
    }

    /// Every route with malformed JSON, wrong types, out-of-range numbers, huge bodies, bad
    /// headers and unknown ids. `dir` is a directory that exists, `task` a task that exists.
    static func badRequests(dir: String, task: UUID, unknown: UUID) -> [BadRequest] {
        let good = #"{"url": "http://127.0.0.1:9/x", "directory": "\#(dir)"}"#
        func add(_ download: String, priority: String? = nil) -> String {
            #"{"downloads": [\#(download)]"# + (priority.map { #", "priority": \#($0)"# } ?? "") + "}"
        }
        func download(_ extra: String) -> String {
            #"{"url": "http://127.0.0.1:9/x", "directory": "\#(dir)", \#(extra)}"#
        }
        let huge = #"{"downloads": [""# + String(repeating: "x", count: 17 << 20) + #""]}"#
        var cases: [BadRequest] = [
            // POST /v1/tasks
            .init(method: .POST, path: "/tasks", body: "{"),
            .init(method: .POST, path: "/tasks", body: "[]"),
            .init(method: .POST, path: "/tasks", body: #"{"downloads": "x"}"#),
            .init(method: .POST, path: "/tasks", body: #"{"downloads": []}"#),
            .init(method: .POST, path: "/tasks", body: add(good, priority: "99999999999")),
            .init(method: .POST, path: "/tasks", body: add(good, priority: "1e99")),
            .init(method: .POST, path: "/tasks", body: add(good, priority: #""high""#)),
            .init(method: .POST, path: "/tasks", body: add(download(#""connections": 0"#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""connections": 65"#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""mirrors": ["file:///etc/passwd"]"#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""mirrors": "http://127.0.0.1:9/y""#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""mirrors": ["http://127.0.0.1:9/x"]"#))),
            .init(
                method: .POST,
                path: "/tasks",
                body: add(
                    download(
                        #""mirrors": ["# + (1...20).map { #""http://127.0.0.1:\#($0)/x""# }.joined(separator: ",") + "]"
                    )
                )
            ),
            .init(method: .POST, path: "/tasks", body: add(download(#""maxConnectionsPerServer": 0"#))),
            // Piece hashes: an unknown algorithm, a length out of bounds, a digest not hex of
            // its length, none, another shape.
            .init(
                method: .POST,
                path: "/tasks",
                body: add(download(#""pieceHashes": {"algorithm": "crc32", "length": 1048576, "hashes": ["00"]}"#))
            ),
            .init(
                method: .POST,
                path: "/tasks",
                body: add(
                    download(
                        #""pieceHashes": {"algorithm": "sha1", "length": 10, "hashes": [""#
                            + String(repeating: "a", count: 40)
                            + #""]}"#
                    )
                )
            ),
            .init(
                method: .POST,
                path: "/tasks",
                body: add(download(#""pieceHashes": {"algorithm": "sha256", "length": 1048576, "hashes": ["zz"]}"#))
            ),
            .init(
                method: .POST,
                path: "/tasks",
                body: add(download(#""pieceHashes": {"algorithm": "sha256", "length": 1048576, "hashes": []}"#))
            ),
            .init(method: .POST, path: "/tasks", body: add(download(#""pieceHashes": ["sha256"]"#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""rateLimit": -1"#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""rateLimit": 9223372036854775807"#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""minSplitSize": 99999999999999999"#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""overwrite": "yes""#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""conections": 4"#))),
            .init(
                method: .POST,
                path: "/tasks",
                body: add(download(#""headers": [{"name": "X", "value": "a\r\nInjected: b"}]"#))
            ),
            .init(
                method: .POST,
                path: "/tasks",
                body: add(download(#""headers": [{"name": "Bad Name", "value": "a"}]"#))
            ),
            .init(method: .POST, path: "/tasks", body: add(download(#""headers": [{"name": "X"}]"#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""fileName": "../escape""#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""session": "a/b""#))),
            .init(method: .POST, path: "/tasks", body: add(download(#""checksum": "sha256:zz""#))),
            .init(
                method: .POST,
                path: "/tasks",
                body: add(#"{"url": "http://127.0.0.1:9/x", "directory": "\#(dir)\u0000x"}"#)
            ),
            .init(
                method: .POST,
                path: "/tasks",
                body: add(#"{"url": "http://127.0.0.1:9/x", "directory": "relative"}"#)
            ),
            .init(method: .POST, path: "/tasks", body: add(#"{"url": "ftp://127.0.0.1/x", "directory": "\#(dir)"}"#)),
            .init(
                method: .POST,
                path: "/tasks",
                body: add(#"{"url": "http://127.0.0.1:99999/x", "directory": "\#(dir)"}"#)
            ),
            .init(
                method: .POST,
                path: "/tasks",
                body: add(
                    #"{"url": "http://127.0.0.1:9/\#(String(repeating: "y", count: 70_000))", "directory": "\#(dir)"}"#
                )
            ),
            .init(method: .POST, path: "/tasks", body: add(good + ", " + download(#""connections": -3"#))),
            .init(method: .POST, path: "/tasks", body: huge, status: 413),
            // GET /v1/tasks, /v1/tasks/ID
            .init(method: .GET, path: "/tasks?session=a%2Fb"),
            .init(method: .GET, path: "/tasks/not-a-uuid"),
            .init(method: .GET, path: "/tasks/\(unknown)", status: 404),
            // POST /v1/tasks/rate-limit
            .init(method: .POST, path: "/tasks/rate-limit", body: "{"),
            .init(method: .POST, path: "/tasks/rate-limit", body: #"{"tasks": {"all": true}}"#),
            .init(method: .POST, path: "/tasks/rate-limit", body: #"{"tasks": {"all": true}, "bytesPerSecond": -5}"#),
            .init(
                method: .POST,
                path: "/tasks/rate-limit",
                body: #"{"tasks": {"all": true}, "bytesPerSecond": 9223372036854775807}"#
            ),
            .init(method: .POST, path: "/tasks/rate-limit", body: #"{"tasks": {"all": true}, "bytesPerSecond": 1e30}"#),
            .init(method: .POST, path: "/tasks/rate-limit", body: #"{"tasks": "all", "bytesPerSecond": 5}"#),
            .init(
                method: .POST,
                path: "/tasks/rate-limit",
                body: #"{"tasks": {"ids": ["\#(unknown)"]}, "bytesPerSecond": 5}"#,
                status: 404
            ),
            .init(
                method: .POST,
                path: "/tasks/rate-limit",
                body: #"{"tasks": {"ids": ["\#(task)", "\#(unknown)"]}, "bytesPerSecond": 5}"#,
                status: 404
            ),
            .init(
                method: .POST,
                path: "/tasks/rate-limit",
                body: #"{"tasks": {"all": true, "extra": 1}, "bytesPerSecond": 5}"#
            ),
            // PUT /v1/settings
            .init(method: .PUT, path: "/settings", body: "{"),
            .init(method: .PUT, path: "/settings", body: "[1, 2]"),
            .init(method: .PUT, path: "/settings", body: #"{"maxConcurrentDownloads": 0}"#),
            .init(method: .PUT, path: "/settings", body: #"{"maxConcurrentDownloads": 1000000}"#),
            .init(method: .PUT, path: "/settings", body: #"{"maxConcurrentDownloads": "7"}"#),
            .init(
                method: .PUT,
                path: "/settings",
                body: #"{"maxConcurrentDownloads": 7, "maxDownloadsPerHost": -1}"#
            ),
            .init(
                method: .PUT,
                path: "/settings",
                body: #"{"maxConcurrentDownloads": 7, "overallRateLimit": 9223372036854775807}"#
            ),
            .init(method: .PUT, path: "/settings", body: #"{"maxConcurentDownloads": 7}"#),
            // Nesting deeper than any parser should follow: refused, never a stack overflow.
            .init(
                method: .PUT,
                path: "/settings",
                body: #"{"x": "# + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000) + "}"
            ),
            .init(
                method: .PUT,
                path: "/settings",
                body: #"{"maxConcurrentDownloads": 7, "x": "# + String(repeating: "1", count: 17 << 20) + "}",
                status: 413
            ),
            // POST /v1/sessions/NAME/ack
            .init(method: .POST, path: "/sessions/s/ack", body: #"{"through": -1}"#),
            .init(method: .POST, path: "/sessions/s/ack", body: #"{"through": 999999999}"#),
            .init(method: .POST, path: "/sessions/s/ack", body: #"{"through": "1"}"#),
            .init(method: .POST, path: "/sessions/s/ack", body: #"{"through": 1, "more": 2}"#),
            .init(method: .POST, path: "/sessions/s/ack", body: "{}"),
            .init(method: .POST, path: "/sessions/\(String(repeating: "n", count: 200))/ack", body: #"{"through": 1}"#),
            .init(method: .POST, path: "/sessions/a%20b/ack", body: #"{"through": 1}"#),
            // GET /v1/sessions/NAME/log and /events
            .init(method: .GET, path: "/sessions/s/log?after=abc"),
            .init(method: .GET, path: "/sessions/s/log?after=-1"),
            .init(method: .GET, path: "/sessions/s/log?after=99999999999999999999"),
            .init(method: .GET, path: "/sessions/a%2Fb/log"),
            .init(method: .GET, path: "/sessions/s/events?after=abc"),
            .init(method: .GET, path: "/sessions/s/events", headers: [("Last-Event-ID", "zz")]),
            .init(method: .GET, path: "/sessions/s/events", headers: [("Last-Event-ID", "999999999")]),
            .init(method: .GET, path: "/sessions/a%2Fb/events"),
            // Unknown routes and methods
            .init(method: .GET, path: "/nothing", status: 404),
            .init(method: .DELETE, path: "/tasks", status: 405),
            .init(method: .PATCH, path: "/settings", body: #"{"maxConcurrentDownloads": 7}"#, status: 405),
        ]
        for operation in TaskOperation.allCases {
            let path = "/tasks/\(operation.rawValue)"
            cases += [
                .init(method: .POST, path: path, body: "{"),
                .init(method: .POST, path: path, body: "{}"),
                .init(method: .POST, path: path, body: #"{"ids": []}"#),
                .init(method: .POST, path: path, body: #"{"ids": "x"}"#),
                .init(method: .POST, path: path, body: #"{"ids": ["not-a-uuid"]}"#),
                .init(method: .POST, path: path, body: #"{"ids": ["\#(unknown)"]}"#, status: 404),
                .init(method: .POST, path: path, body: #"{"ids": ["\#(task)", "\#(unknown)"]}"#, status: 404),
                .init(method: .POST, path: path, body: #"{"session": "s", "all": true}"#),
                .init(method: .POST, path: path, body: #"{"session": "a/b"}"#),
                .init(method: .POST, path: path, body: #"{"all": "yes"}"#),
                .init(method: .POST, path: path, body: #"{"all": true, "deleteFiles": 1}"#),
                .init(method: .POST, path: path, body: #"{"all": true, "everything": true}"#),
            ]
        }
        return cases
    }

    /// What a rejected request must leave as it was.
    struct Snapshot: Equatable {
        var tasks: [DownloadInfo]
        var settings: API.Settings
        var sessions: [API.Session]
        var log: [Int64]

        init(_ client: HaulClient) async throws {
            tasks = try await client.tasks()
            settings = try await client.settings()
            sessions = try await client.sessions()
            log = try await client.loggedEvents(session: "s").compactMap(\.eventID)
        }
    }

    @Test(
        "every route × malformed JSON, wrong types, out-of-range numbers, huge bodies, bad headers, unknown ids: a 4xx JSON error, nothing changed, the daemon still answering",
        arguments: StoreEngine.allCases
    )
    func badInputTable(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            // A task that stays put: its server sends nothing after the first bytes.
            server.set("/seed", .init(size: 1_000_000, stallAt: 1_000))
            try await withDaemon(on: engine, home: home) { client, _ in
                let added = try await client.add([
                    DownloadRequest(url: server.url("/seed"), destination: .directory(out), session: "s")
                ])
                _ = try await client.pause(API.Selector(ids: [added[0].id]))
                // In a fleet the run that had begun stops after the answer: its last records
                // (state, checkpoint) land, then its lease is given back (no node holds it).
                #expect(
                    try await waitUntil {
                        let info = try await client.info(added[0].id)
                        return info.state == .paused && info.node == nil
                    }
                )
                // And whatever the stopped run still records (its last event, a checkpoint)
                // has landed: two readings half a second apart agree.
                var before = try await Snapshot(client)
                #expect(
                    try await waitUntil(every: .milliseconds(500)) {
                        let now = try await Snapshot(client)
                        defer { before = now }
                        return now == before
                    }
                )
                #expect(before.tasks.map(\.state) == [.paused])
                #expect(!before.log.isEmpty)

                let cases = Self.badRequests(dir: out, task: added[0].id, unknown: UUID())
                for bad in cases {
                    let (status, text, _) = try await Self.exchange(
                        bad.method,
                        bad.path,
                        bad.body,
                        home: home,
                        headers: bad.headers
                    )
                    #expect(status == bad.status, "\(bad): \(text.prefix(300))")
                    let failure = try? HaulJSON.decoder.decode(API.Failure.self, from: Data(text.utf8))
                    #expect(failure != nil, "\(bad): not the API's JSON error: \(text.prefix(300))")
                    if let failure {
                        #expect(
                            !failure.error.isEmpty && !failure.error.contains("DecodingError"),
                            "\(bad): \(failure.error)"
                        )
                        #expect(
                            failure.error.count < 400,
                            "\(bad): one sentence, not an echo: \(failure.error.prefix(200))"
                        )
                    }
                    #expect(try await Snapshot(client) == before, "\(bad) changed something")
                }
                #expect(cases.count > 100)
                #expect(try await client.status().pid > 0)
                #expect(server.requests(for: "/x").isEmpty)
            }
        }
    }
}
