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

extension APIHardeningTests {
    /// Every route of the API against a table of hostile requests, on a daemon holding a task.
    @Suite("Daemon API: every route × hostile input")
    struct Table {
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
                            #""mirrors": ["# + (1...20).map { #""http://127.0.0.1:\#($0)/x""# }.joined(separator: ",")
                                + "]"
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
                .init(
                    method: .POST,
                    path: "/tasks",
                    body: add(#"{"url": "ftp://127.0.0.1/x", "directory": "\#(dir)"}"#)
                ),
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
                .init(
                    method: .POST,
                    path: "/tasks/rate-limit",
                    body: #"{"tasks": {"all": true}, "bytesPerSecond": -5}"#
                ),
                .init(
                    method: .POST,
                    path: "/tasks/rate-limit",
                    body: #"{"tasks": {"all": true}, "bytesPerSecond": 9223372036854775807}"#
                ),
                .init(
                    method: .POST,
                    path: "/tasks/rate-limit",
                    body: #"{"tasks": {"all": true}, "bytesPerSecond": 1e30}"#
                ),
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
                // A fleet's node and caps: a bad name, caps out of range (or no fleet at all).
                .init(method: .PUT, path: "/settings?node=bad%20name", body: #"{"maxConcurrentDownloads": 2}"#),
                .init(method: .GET, path: "/settings?node=%00"),
                .init(method: .PUT, path: "/settings", body: #"{"fleet": {"maxConcurrentDownloads": -1}}"#),
                .init(method: .PUT, path: "/settings", body: #"{"fleet": {"overallRateLimit": -5}}"#),
                .init(method: .PUT, path: "/settings", body: #"{"fleet": {"maxDownloadsPerHost": 100001}}"#),
                .init(method: .PUT, path: "/settings", body: #"{"fleet": {"maxConcurentDownloads": 3}}"#),
                // POST /v1/fleet/nodes/NAME/drain
                .init(method: .POST, path: "/fleet/nodes/bad%20name/drain", body: "{}"),
                .init(method: .POST, path: "/fleet/nodes/n1/drain", body: "{"),
                .init(method: .POST, path: "/fleet/nodes/n1/drain", body: #"{"finishing": "yes"}"#),
                // Nesting deeper than any parser should follow: refused, never a stack overflow.
                .init(
                    method: .PUT,
                    path: "/settings",
                    body: #"{"x": "# + String(repeating: "[", count: 100_000) + String(repeating: "]", count: 100_000)
                        + "}"
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
                .init(
                    method: .POST,
                    path: "/sessions/\(String(repeating: "n", count: 200))/ack",
                    body: #"{"through": 1}"#
                ),
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
                        let (status, text, _) = try await APIHardeningTests.exchange(
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
}
