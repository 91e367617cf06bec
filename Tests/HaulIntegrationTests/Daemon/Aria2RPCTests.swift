import AsyncHTTPClient
import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import HummingbirdWSClient
import Logging
import NIOCore
import NIOFoundationCompat
import Synchronization
import Testing

@testable import Haul
@testable import HaulDaemon

/// What a WebSocket client received, in order.
private final class Inbox: Sendable {
    let messages = Mutex<[JSONValue]>([])
}

/// aria2's JSON-RPC on the daemon's TCP listener, driven over HTTP as aria2's clients do, and
/// compared with a real `aria2c --enable-rpc` answering the same calls.
@Suite("aria2 JSON-RPC", .serialized, .postgresServer, .timeLimit(.minutes(10)))
struct Aria2RPCTests {
    /// A JSON-RPC endpoint and its secret.
    struct Endpoint {
        let url: String
        let secret: String

        /// Calls `method` with the secret first, returning the whole response object.
        func call(
            _ method: String,
            _ params: [JSONValue] = [],
            secret: String? = nil
        ) async throws -> [String: JSONValue] {
            let body: JSONValue = [
                "jsonrpc": "2.0", "id": "t", "method": .string(method),
                "params": .array([.string("token:" + (secret ?? self.secret))] + params),
            ]
            return try await post(body).object ?? [:]
        }

        /// The result of a call that must succeed.
        func result(_ method: String, _ params: [JSONValue] = []) async throws -> JSONValue {
            let response = try await call(method, params)
            return try #require(response["result"], "\(method): \(response)")
        }

        func post(_ body: JSONValue) async throws -> JSONValue {
            try await post(data: Aria2RPC.encode(body))
        }

        func post(data: Data) async throws -> JSONValue {
            var request = HTTPClientRequest(url: url)
            request.method = .POST
            request.body = .bytes(ByteBuffer(data: data))
            return try await Self.send(request)
        }

        func get(_ query: String) async throws -> (status: Int, body: Data) {
            let request = HTTPClientRequest(url: url + "?" + query)
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            let body = try await response.body.collect(upTo: 1 << 20)
            return (Int(response.status.code), Data(buffer: body))
        }

        static func send(_ request: HTTPClientRequest) async throws -> JSONValue {
            let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
            // aria2's statuses: 200 for results and batches, 400 for an error, 500 for no JSON.
            #expect([200, 400, 500].contains(response.status.code))
            let body = try await response.body.collect(upTo: 1 << 20)
            return try JSONDecoder().decode(JSONValue.self, from: Data(buffer: body))
        }
    }

    /// Runs a daemon listening on loopback TCP with `--rpc-secret`, and its `/jsonrpc`.
    static func withHaul(
        on engine: StoreEngine,
        allowsAllOrigins: Bool = false,
        _ body: (Endpoint, String) async throws -> Void
    ) async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        try await withDaemon(
            on: engine,
            home: temp.file("home"),
            listen: ("127.0.0.1", 0),
            rpcSecret: "s3cret-rpc",
            rpcDirectory: out,
            rpcAllowsAllOrigins: allowsAllOrigins
        ) {
            client,
            _ in
            let listen = try #require(try await client.status().listen)
            try await body(Endpoint(url: "http://\(listen)/jsonrpc", secret: "s3cret-rpc"), out)
        }
    }

    /// The shape of a value: its type, and for an object each key's shape.
    static func shape(_ value: JSONValue) -> String {
        switch value {
        case .null: return "null"
        case .bool: return "bool"
        case .int, .double: return "number"
        case .string: return "string"
        case .array(let items): return "[" + (items.first.map(shape) ?? "") + "]"
        case .object(let fields):
            return "{" + fields.keys.sorted().map { "\($0):\(shape(fields[$0]!))" }.joined(separator: ",") + "}"
        }
    }

    @Test(
        "the secret as aria2 takes it: none or a wrong one is Unauthorized; listing methods needs none",
        arguments: StoreEngine.allCases
    )
    func authorisation(engine: StoreEngine) async throws {
        try await Self.withHaul(on: engine) { haul, _ in
            let wrong = try await haul.call("aria2.getVersion", secret: "nope")
            #expect(wrong["error"] == ["code": .int(1), "message": "Unauthorized"])
            let none = try await haul.post(["jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion"])
            #expect(none.object?["error"] == ["code": .int(1), "message": "Unauthorized"])
            #expect(none.object?["id"] == .int(1))
            let methods = try await haul.post(["jsonrpc": "2.0", "id": "m", "method": "system.listMethods"])
            let names = methods.object?["result"]?.array?.compactMap { $0.string } ?? []
            #expect(names.contains("aria2.addUri") && names.contains("aria2.tellStatus"))
            let version = try await haul.result("aria2.getVersion")
            #expect(version.object?["version"] == .string(HaulVersion.current))
        }
    }

    @Test(
        "what is not a request: parse error, invalid request, no such method, a missing parameter",
        arguments: StoreEngine.allCases
    )
    func malformed(engine: StoreEngine) async throws {
        try await Self.withHaul(on: engine) { haul, _ in
            let parse = try await haul.post(data: Data("not json".utf8))
            #expect(
                parse == ["id": .null, "jsonrpc": "2.0", "error": ["code": .int(-32700), "message": "Parse error."]]
            )
            let invalid = try await haul.post(["id": 7])
            #expect(invalid.object?["error"]?.object?["code"] == .int(-32600))
            let unknown = try await haul.call("aria2.nope")
            #expect(unknown["error"]?.object?["message"] == "No such method: aria2.nope")
            let missing = try await haul.call("aria2.tellStatus")
            #expect(missing["error"]?.object?["message"] == "The parameter at 0 is required but missing.")
            let notFound = try await haul.call("aria2.tellStatus", ["0123456789abcdef"])
            #expect(notFound["error"]?.object?["message"] == "GID 0123456789abcdef is not found")
            let torrent = try await haul.call("aria2.addTorrent", ["AAAA"])
            #expect(torrent["error"]?.object?["code"] == .int(1))
        }
    }

    @Test(
        "addUri downloads the file: tellStatus goes to complete with the lengths, the file is right, tellStopped lists it",
        arguments: StoreEngine.allCases
    )
    func addURIToCompletion(engine: StoreEngine) async throws {
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 3 << 20, seed: 4))
            try await Self.withHaul(on: engine) { haul, out in
                let gid = try #require(
                    try await haul.result(
                        "aria2.addUri",
                        [[.string(server.url("/a.bin").absoluteString)], ["out": "x.bin"]]
                    )
                    .string
                )
                #expect(GID.isValid(gid) && gid.count == 16)
                var status: [String: JSONValue] = [:]
                #expect(
                    try await waitUntil {
                        status = try await haul.result("aria2.tellStatus", [.string(gid)]).object ?? [:]
                        return status["status"] == "complete"
                    }
                )
                #expect(status["totalLength"] == .string(String(3 << 20)))
                #expect(status["completedLength"] == .string(String(3 << 20)))
                #expect(status["dir"] == .string(out))
                #expect(sha256(file: out + "/x.bin") == server.sha256("/a.bin"))
                let files = try await haul.result("aria2.getFiles", [.string(gid)])
                #expect(files.array?.first?.object?["path"] == .string(out + "/x.bin"))
                // The keys filter, and a unique prefix of the GID.
                let some = try await haul.result(
                    "aria2.tellStatus",
                    [.string(String(gid.prefix(6))), ["gid", "status"]]
                )
                #expect(some == ["gid": .string(gid), "status": "complete"])
                let stopped = try await haul.result("aria2.tellStopped", [0, 10, ["gid"]])
                #expect(stopped == [["gid": .string(gid)]])
                // aria2's windows: none asked, a negative offset from the end, far out of range.
                #expect(try await haul.result("aria2.tellStopped", [0, 0]) == [])
                #expect(try await haul.result("aria2.tellStopped", [-1, 5, ["gid"]]) == [["gid": .string(gid)]])
                #expect(try await haul.result("aria2.tellStopped", [-9_000_000_000_000, 5]) == [])
                #expect(try await haul.result("aria2.tellStopped", [9_000_000_000_000, 5]) == [])
                let negative = try await haul.call("aria2.tellStopped", [0, -1])
                #expect(negative["error"]?.object?["code"] == 1)
                #expect(try await haul.result("aria2.removeDownloadResult", [.string(gid)]) == "OK")
                #expect(try await haul.result("aria2.tellStopped", [0, 10]) == [])
            }
        }
    }

    @Test(
        "addMetalink: each file from its URLs, checked against its hash, in dir; a name leaving dir is refused",
        arguments: StoreEngine.allCases
    )
    func addMetalink(engine: StoreEngine) async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                a.set("/one.bin", .init(size: 2 << 20, seed: 31))
                b.set("/one.bin", .init(size: 2 << 20, seed: 31))
                a.set("/two.bin", .init(size: 1 << 20, seed: 32))
                func document(_ name: String) -> Data {
                    Fixtures.metalink4(
                        """
                          <file name="\(name)">
                            <size>\(2 << 20)</size>
                            <hash type="sha-256">\(a.sha256("/one.bin"))</hash>
                            <url priority="1">\(a.url("/one.bin").absoluteString)</url>
                            <url priority="2">\(b.url("/one.bin").absoluteString)</url>
                          </file>
                          <file name="sub/two.bin">
                            <hash type="sha-256">\(a.sha256("/two.bin"))</hash>
                            <url>\(a.url("/two.bin").absoluteString)</url>
                          </file>
                        """
                    )
                }
                try await Self.withHaul(on: engine) { haul, out in
                    let encoded = document("one.bin").base64EncodedString()
                    let gids = try await haul.result("aria2.addMetalink", [.string(encoded)]).array?.compactMap(
                        \.string
                    )
                    #expect(gids?.count == 2)
                    for gid in gids ?? [] {
                        #expect(
                            try await waitUntil {
                                try await haul.result("aria2.tellStatus", [.string(gid), ["status"]]) == [
                                    "status": "complete"
                                ]
                            }
                        )
                    }
                    #expect(sha256(file: out + "/one.bin") == a.sha256("/one.bin"))
                    #expect(sha256(file: out + "/sub/two.bin") == a.sha256("/two.bin"))
                    let uris = try await haul.result("aria2.getUris", [.string(gids?.first ?? "")]).array?.count
                    #expect(uris == 2, "the file's two URLs")
                    #expect(try await haul.result("aria2.getPeers", [.string(gids?.first ?? "")]) == [])

                    let escaping = document("../escape.bin").base64EncodedString()
                    let refused = try await haul.call("aria2.addMetalink", [.string(escaping)])
                    #expect(refused["error"]?.object?["code"] == 1, "\(refused)")
                    #expect(!FileManager.default.fileExists(atPath: out + "/../escape.bin"))
                    let garbage = try await haul.call("aria2.addMetalink", ["not base64 !"])
                    #expect(garbage["error"]?.object?["code"] == 1)
                }
            }
        }
    }

    @Test(
        "pause and unpause: paused in tellWaiting, then active or complete; the file is right",
        arguments: StoreEngine.allCases
    )
    func pauseAndUnpause(engine: StoreEngine) async throws {
        try await TestServer.withServer { server in
            server.set("/slow.bin", .init(size: 4 << 20, seed: 5, bytesPerSecond: 1 << 20))
            try await Self.withHaul(on: engine) { haul, out in
                let gid = try #require(
                    try await haul.result("aria2.addUri", [[.string(server.url("/slow.bin").absoluteString)]]).string
                )
                #expect(
                    try await waitUntil {
                        try await haul.result("aria2.tellStatus", [.string(gid), ["status"]]) == ["status": "active"]
                    }
                )
                #expect(try await haul.result("aria2.pause", [.string(gid)]) == .string(gid))
                #expect(
                    try await waitUntil {
                        try await haul.result("aria2.tellWaiting", [0, 10, ["gid", "status"]])
                            == [["gid": .string(gid), "status": "paused"]]
                    }
                )
                server.update("/slow.bin") { $0.bytesPerSecond = nil }
                #expect(try await haul.result("aria2.unpause", [.string(gid)]) == .string(gid))
                #expect(
                    try await waitUntil {
                        try await haul.result("aria2.tellStatus", [.string(gid), ["status"]]) == ["status": "complete"]
                    }
                )
                #expect(sha256(file: out + "/slow.bin") == server.sha256("/slow.bin"))
                // Pausing what is complete is refused, as aria2 refuses it.
                let again = try await haul.call("aria2.pause", [.string(gid)])
                #expect(again["error"]?.object?["code"] == .int(1))
            }
        }
    }

    @Test(
        "changePosition and addUri's position order the waiting list, and the next to start is the first of it",
        arguments: StoreEngine.allCases
    )
    func positions(engine: StoreEngine) async throws {
        try await TestServer.withServer { server in
            server.set("/blocker.bin", .init(size: 4 << 20, seed: 7, bytesPerSecond: 256 << 10))
            for name in ["a", "b", "c", "d"] { server.set("/\(name).bin", .init(size: 100_000, seed: 8)) }
            try await Self.withHaul(on: engine) { haul, _ in
                #expect(try await haul.result("aria2.changeGlobalOption", [["max-concurrent-downloads": "1"]]) == "OK")
                func add(_ name: String, _ position: JSONValue? = nil) async throws -> String {
                    var params: [JSONValue] = [[.string(server.url("/\(name).bin").absoluteString)], [:]]
                    if let position { params.append(position) }
                    return try #require(try await haul.result("aria2.addUri", params).string)
                }
                let blocker = try await add("blocker")
                #expect(
                    try await waitUntil {
                        try await haul.result("aria2.tellStatus", [.string(blocker), ["status"]]) == [
                            "status": "active"
                        ]
                    }
                )
                let (a, b, c) = (try await add("a"), try await add("b"), try await add("c"))
                func waiting() async throws -> [String] {
                    try await haul.result("aria2.tellWaiting", [0, 10, ["gid"]]).array?.compactMap {
                        $0.object?["gid"]?.string
                    } ?? []
                }
                #expect(try await waiting() == [a, b, c])
                #expect(try await haul.result("aria2.changePosition", [.string(c), 0, "POS_SET"]) == .int(0))
                #expect(try await waiting() == [c, a, b])
                #expect(try await haul.result("aria2.changePosition", [.string(c), 1, "POS_CUR"]) == .int(1))
                #expect(try await waiting() == [a, c, b])
                #expect(try await haul.result("aria2.changePosition", [.string(a), 0, "POS_END"]) == .int(2))
                #expect(try await waiting() == [c, b, a])
                // Beyond either end: kept within the list.
                #expect(
                    try await haul.result("aria2.changePosition", [.string(b), .int(-1 << 62), "POS_CUR"]) == .int(0)
                )
                #expect(
                    try await haul.result("aria2.changePosition", [.string(b), .int(Int64.max), "POS_END"]) == .int(2)
                )
                #expect(try await waiting() == [c, a, b])
                let d = try await add("d", 1)
                #expect(try await waiting() == [c, d, a, b])
                let past = try await add("d", 99)
                #expect(past == d, "the same download again is the same task")

                // Refused: a running download, an unknown how, a negative position.
                let running = try await haul.call("aria2.changePosition", [.string(blocker), 0, "POS_SET"])
                #expect(
                    running["error"]?.object?["message"]?.string?.contains("not found in the waiting queue") == true
                )
                let how = try await haul.call("aria2.changePosition", [.string(a), 0, "POS_MIDDLE"])
                #expect(how["error"]?.object?["code"] == .int(1))
                let negative = try await haul.call(
                    "aria2.addUri",
                    [[.string(server.url("/e.bin").absoluteString)], [:], .int(-1)]
                )
                #expect(negative["error"]?.object?["message"] == "position must be an integer, 0 or more.")
                #expect(try await waiting() == [c, d, a, b], "a refused call changed nothing")

                // The scheduler follows the list: with the blocker paused, c starts next.
                #expect(try await haul.result("aria2.pause", [.string(blocker)]) == .string(blocker))
                #expect(
                    try await waitUntil {
                        let active = try await haul.result("aria2.tellActive", [["gid"]]).array ?? []
                        let stopped = try await haul.result("aria2.tellStopped", [0, 10, ["gid"]]).array ?? []
                        return (active + stopped).first?.object?["gid"]?.string == c
                    }
                )
            }
        }
    }

    @Test(
        "a batch, system.multicall, and a GET with Base64 params and a JSONP callback",
        arguments: StoreEngine.allCases
    )
    func batchesAndGet(engine: StoreEngine) async throws {
        try await Self.withHaul(on: engine) { haul, _ in
            let batch = try await haul.post([
                ["jsonrpc": "2.0", "id": "a", "method": "aria2.getVersion", "params": ["token:s3cret-rpc"]],
                ["jsonrpc": "2.0", "id": "b", "method": "aria2.getGlobalStat", "params": ["token:nope"]],
            ])
            let answers = try #require(batch.array)
            #expect(answers.count == 2)
            #expect(
                answers[0].object?["result"] != nil && answers[1].object?["error"]?.object?["message"] == "Unauthorized"
            )
            let multi = try await haul.post([
                "jsonrpc": "2.0", "id": "m", "method": "system.multicall",
                "params": [
                    [
                        ["methodName": "aria2.getVersion", "params": ["token:s3cret-rpc"]],
                        ["methodName": "aria2.tellStatus", "params": ["token:s3cret-rpc", "ffffffffffffffff"]],
                    ]
                ],
            ])
            let results = try #require(multi.object?["result"]?.array)
            #expect(results.count == 2)
            #expect(results[0].array?.first?.object?["version"] == .string(HaulVersion.current))
            #expect(results[1].object?["message"] == "GID ffffffffffffffff is not found")

            let params = Data(#"["token:s3cret-rpc"]"#.utf8).base64EncodedString()
                .addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
            let (status, body) = try await haul.get("method=aria2.getGlobalStat&id=g&params=\(params)")
            #expect(status == 200)
            let stat = try JSONDecoder().decode(JSONValue.self, from: body)
            #expect(stat.object?["id"] == "g" && stat.object?["result"]?.object?["numActive"] == "0")
            let (_, jsonp) = try await haul.get("method=aria2.getGlobalStat&id=g&params=\(params)&jsoncallback=cb")
            let text = String(decoding: jsonp, as: UTF8.self)
            #expect(text.hasPrefix("cb({") && text.hasSuffix("})"))
            let (hostileStatus, hostile) = try await haul.get(
                "method=aria2.getVersion&params=\(params)&jsoncallback=alert(1)"
            )
            #expect(hostileStatus == 400 && String(decoding: hostile, as: UTF8.self).contains("-32600"))
        }
    }

    @Test(
        "over WebSocket: answers to calls, and aria2's notifications in order — start, complete, pause, stop, error",
        arguments: StoreEngine.allCases
    )
    func webSocketNotifications(engine: StoreEngine) async throws {
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 1 << 20, seed: 7))
            server.set("/slow.bin", .init(size: 8 << 20, seed: 8, bytesPerSecond: 1 << 20))
            try await Self.withHaul(on: engine) { haul, out in
                let inbox = Inbox()
                func messages() -> [JSONValue] { inbox.messages.withLock { $0 } }
                func notified(_ method: String, _ gid: String) -> Bool {
                    messages().contains {
                        $0.object?["method"] == .string(method) && $0.object?["params"] == [["gid": .string(gid)]]
                    }
                }
                /// The result of the answer with this id, once it came.
                func answer(_ id: String) async throws -> JSONValue? {
                    var found: JSONValue?
                    _ = try await waitUntil {
                        found = messages().first { $0.object?["id"] == .string(id) }
                        return found != nil
                    }
                    return found
                }
                func call(
                    _ id: String,
                    _ method: String,
                    _ params: [JSONValue],
                    secret: String = "s3cret-rpc"
                ) -> String {
                    let request: JSONValue = [
                        "jsonrpc": "2.0", "id": .string(id), "method": .string(method),
                        "params": .array([.string("token:" + secret)] + params),
                    ]
                    return String(decoding: Aria2RPC.encode(request), as: UTF8.self)
                }
                let url = haul.url.replacingOccurrences(of: "http://", with: "ws://")
                let outbox = AsyncStream<String>.makeStream()
                let outgoing = outbox.stream
                let client = Task { @Sendable in
                    try await WebSocketClient.connect(url: url, logger: Logger(label: "ws.test")) {
                        inbound,
                        outbound,
                        _ in
                        try await withThrowingTaskGroup(of: Void.self) { group in
                            group.addTask {
                                for await text in outgoing { try await outbound.write(.text(text)) }
                                try await outbound.close(.normalClosure, reason: nil)
                            }
                            for try await message in inbound.messages(maxSize: 1 << 20) {
                                guard case .text(let text) = message else { continue }
                                let value = try JSONDecoder().decode(JSONValue.self, from: Data(text.utf8))
                                inbox.messages.withLock { $0.append(value) }
                            }
                            group.cancelAll()
                        }
                    }
                }
                defer { client.cancel() }

                outbox.continuation.yield(call("bad", "aria2.getVersion", [], secret: "nope"))
                #expect(try await answer("bad")?.object?["error"] == ["code": 1, "message": "Unauthorized"])

                outbox.continuation.yield(call("a", "aria2.addUri", [[.string(server.url("/a.bin").absoluteString)]]))
                let gid = try #require(try await answer("a")?.object?["result"]?.string)
                #expect(try await waitUntil { notified("aria2.onDownloadComplete", gid) })
                #expect(notified("aria2.onDownloadStart", gid))
                let order = messages().compactMap { message -> String? in
                    guard message.object?["params"] == [["gid": .string(gid)]] else { return nil }
                    return message.object?["method"]?.string
                }
                #expect(order == ["aria2.onDownloadStart", "aria2.onDownloadComplete"])
                #expect(sha256(file: out + "/a.bin") == server.sha256("/a.bin"))

                outbox.continuation.yield(
                    call("s", "aria2.addUri", [[.string(server.url("/slow.bin").absoluteString)]])
                )
                let slow = try #require(try await answer("s")?.object?["result"]?.string)
                #expect(try await waitUntil { notified("aria2.onDownloadStart", slow) })
                outbox.continuation.yield(call("p", "aria2.pause", [.string(slow)]))
                #expect(try await waitUntil { notified("aria2.onDownloadPause", slow) })
                outbox.continuation.yield(call("r", "aria2.remove", [.string(slow)]))
                #expect(try await waitUntil { notified("aria2.onDownloadStop", slow) })

                outbox.continuation.yield(call("e", "aria2.addUri", [[.string(server.url("/missing").absoluteString)]]))
                let missing = try #require(try await answer("e")?.object?["result"]?.string)
                #expect(try await waitUntil { notified("aria2.onDownloadError", missing) })
                outbox.continuation.finish()
                _ = try await client.value
            }
        }
    }

    /// Runs `Tests/aria2p/<script>` with that Python against `haul` (its port and secret, then
    /// `urls`); nil — a failure in CI — when the Python is not installed.
    static func runScript(
        _ script: String,
        against haul: Endpoint,
        _ urls: [URL]
    ) async throws -> (
        status: Int32, output: String
    )? {
        guard let python = TestPaths.python else {
            if ExternalServer.isCI {
                Issue.record("The test Python is not in .build/test-python (.ci/run installs it)")
            }
            return nil
        }
        let path = TestPaths.file("Tests/aria2p/" + script)
        let port = try #require(URL(string: haul.url)?.port)
        return try await Command.run(python, [path, String(port), haul.secret] + urls.map(\.absoluteString))
    }

    @Test(
        "aria2p, a real aria2 client, drives Haul: its add, show, pause, resume, purge, its API and its notifications",
        arguments: StoreEngine.allCases
    )
    func aria2p(engine: StoreEngine) async throws {
        try await TestServer.withServer { server in
            server.set("/fast.bin", .init(size: 2 << 20, seed: 11))
            server.set("/slow.bin", .init(size: 16 << 20, seed: 12, bytesPerSecond: 1 << 20))
            server.set("/notify.bin", .init(size: 1 << 20, seed: 13))
            try await Self.withHaul(on: engine) { haul, out in
                let urls = ["/fast.bin", "/slow.bin", "/notify.bin"].map { server.url($0) }
                guard let (status, output) = try await Self.runScript("drive.py", against: haul, urls) else { return }
                #expect(status == 0, "\(output)")
                var steps: [String: [String: JSONValue]] = [:]
                for line in output.split(separator: "\n") where line.hasPrefix("{") {
                    let value = try JSONDecoder().decode(JSONValue.self, from: Data(line.utf8))
                    if let step = value.object?["step"]?.string { steps[step] = value.object }
                }
                // The command line added the file, and showed it.
                #expect(steps["cli add"]?["code"] == 0, "\(output)")
                #expect(sha256(file: out + "/fast.bin") == server.sha256("/fast.bin"))
                let fastGID = try #require(steps["cli show"]?["gid"]?.string, "\(output)")
                #expect(steps["cli show"]?["out"]?.string?.contains(fastGID) == true, "\(output)")
                // Paused, resumed, removed: Haul's task went through those states.
                #expect(steps["paused"]?["ok"] == .bool(true), "\(output)")
                #expect(steps["resumed"]?["ok"] == .bool(true), "\(output)")
                #expect(steps["removed"]?["ok"] == .bool(true), "\(output)")
                // Once its listener was known to be connected (a pause it heard), the notification
                // arrived for the download it added, whose file is right.
                #expect(steps["listening"]?["ok"] == .bool(true), "\(output)")
                #expect(steps["notification"]?["heard"] == .bool(true), "\(output)")
                #expect(sha256(file: out + "/notify.bin") == server.sha256("/notify.bin"))
                // Purged: nothing finished or removed is listed any more.
                #expect(steps["cli purge"]?["code"] == 0, "\(output)")
                #expect(steps["after purge"]?["gids"] == [], "\(output)")
            }
        }
    }

    @Test(
        "a raw WebSocket client (Python's websockets): Unauthorized, multicall, and every notification",
        arguments: StoreEngine.allCases
    )
    func pythonWebSocketClient(engine: StoreEngine) async throws {
        try await TestServer.withServer { server in
            server.set("/fast.bin", .init(size: 1 << 20, seed: 41))
            server.set("/slow.bin", .init(size: 16 << 20, seed: 42, bytesPerSecond: 1 << 20))
            try await Self.withHaul(on: engine) { haul, out in
                let urls = ["/fast.bin", "/slow.bin", "/missing.bin"].map { server.url($0) }
                guard let (status, output) = try await Self.runScript("websocket_check.py", against: haul, urls)
                else { return }
                #expect(status == 0, "\(output)")
                let line = try #require(output.split(separator: "\n").last { $0.hasPrefix("{") }, "\(output)")
                let report = try #require(try JSONDecoder().decode(JSONValue.self, from: Data(line.utf8)).object)
                let unauthorized: JSONValue = ["code": 1, "message": "Unauthorized"]
                #expect(report["missing"]?.object?["error"] == unauthorized, "\(output)")
                #expect(report["wrong"]?.object?["error"] == unauthorized, "\(output)")
                let calls = report["multicall"]?.object?["result"]?.array
                #expect(calls?.first?.array?.first?.object?["version"] == .string(HaulVersion.current), "\(output)")
                #expect(calls?.last == unauthorized, "\(output)")
                for step in ["fast start", "fast complete", "slow start", "slow pause", "slow stop", "error"] {
                    #expect(report[step] == .bool(true), "\(step): \(output)")
                }
                #expect(sha256(file: out + "/fast.bin") == server.sha256("/fast.bin"))
            }
        }
    }

    @Test(
        "the lowest speed: set through /v1/settings and aria2's changeGlobalOption, read through both, used by the runs that start"
    )
    func lowestSpeedSetting() async throws {
        let temp = try TemporaryDirectory()
        try await withDaemon(home: temp.file("home"), listen: ("127.0.0.1", 0), rpcSecret: "s3cret-rpc") {
            client,
            daemon in
            let listen = try #require(try await client.status().listen)
            let rpc = Endpoint(url: "http://\(listen)/jsonrpc", secret: "s3cret-rpc")
            #expect(try await client.settings().lowestSpeedLimit == 0)
            let set = try await client.update(API.Settings(lowestSpeedLimit: 10 << 10, lowestSpeedTime: 5))
            #expect(set.lowestSpeedLimit == 10 << 10 && set.lowestSpeedTime == 5)
            let global = try await rpc.result("aria2.getGlobalOption")
            #expect(global.object?["lowest-speed-limit"] == "10240")
            // aria2's name changes the speed and keeps the time.
            #expect(try await rpc.result("aria2.changeGlobalOption", [["lowest-speed-limit": "2K"]]) == "OK")
            let changed = try await client.settings()
            #expect(changed.lowestSpeedLimit == 2048 && changed.lowestSpeedTime == 5)
            #expect(try await rpc.result("aria2.changeGlobalOption", [["lowest-speed-limit": "0"]]) == "OK")
            #expect(try await client.settings().lowestSpeedLimit == 0)
            await #expect(throws: HaulError.self) { try await client.update(API.Settings(lowestSpeedTime: 0)) }
            await #expect(throws: HaulError.self) { try await client.update(API.Settings(lowestSpeedLimit: -1)) }
        }
    }

    @Test("an empty RPC secret means none given: 'token:' is refused, the daemon's token is the secret")
    func emptySecret() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        try await withDaemon(home: home, listen: ("127.0.0.1", 0), rpcSecret: "") { client, _ in
            let listen = try #require(try await client.status().listen)
            let token = try String(contentsOfFile: home + "/daemon.token", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            let empty = Endpoint(url: "http://\(listen)/jsonrpc", secret: "")
            #expect(try await empty.call("aria2.getVersion")["error"] == ["code": .int(1), "message": "Unauthorized"])
            let added = try await empty.call(
                "aria2.addUri",
                [["http://127.0.0.1:9/a.bin"], ["dir": .string(temp.path)]]
            )
            #expect(added["error"] == ["code": .int(1), "message": "Unauthorized"])
            #expect(try await client.tasks().isEmpty)
            let right = Endpoint(url: "http://\(listen)/jsonrpc", secret: token)
            #expect(try await right.result("aria2.getVersion").object?["version"] != nil)
        }
    }

    @Test("no answer shows a URL's password or secret query value: every aria2 method and every /v1 read")
    func plantedSecretsHidden() async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let home = temp.file("home")
        try await TestServer.withServer { server in
            server.set("/held.bin", .init(size: 1 << 20, seed: 4))
            let planted = "http://user:planted-password@127.0.0.1:\(server.port)"
            try await withDaemon(
                home: home,
                listen: ("127.0.0.1", 0),
                rpcSecret: "s3cret-rpc",
                rpcDirectory: out
            ) { client, _ in
                let listen = try #require(try await client.status().listen)
                let rpc = Endpoint(url: "http://\(listen)/jsonrpc", secret: "s3cret-rpc")
                // Through /v1: one that fails (its error names the URL), one paused; through
                // aria2: one paused with a mirror.
                let failed = try await client.add([
                    DownloadRequest(
                        url: URL(string: planted + "/missing.bin?token=planted-token")!,
                        destination: .directory(out)
                    )
                ])
                #expect(try await waitUntil { try await client.info(failed[0].id).state == .failed })
                var held = DownloadRequest(
                    url: URL(string: planted + "/held.bin?X-Amz-Signature=planted-signature")!,
                    destination: .directory(out)
                )
                held.mirrors = [URL(string: "http://planted-user@127.0.0.1:\(server.port)/held.bin")!]
                let added = try await client.add([held])
                _ = try await client.pause(.tasks([added[0].id]))
                let gid = try await rpc.result(
                    "aria2.addUri",
                    [[.string(planted + "/held.bin?access_token=planted-access")], ["pause": "true", "out": "b.bin"]]
                )
                let gids = [GID.of(failed[0].id), GID.of(added[0].id), try #require(gid.string)]
                var answers: [String] = []
                for gid in gids {
                    for method in ["aria2.tellStatus", "aria2.getUris", "aria2.getFiles", "aria2.getOption"] {
                        answers.append("\(try await rpc.call(method, [.string(gid)]))")
                    }
                }
                answers.append("\(try await rpc.call("aria2.tellActive"))")
                answers.append("\(try await rpc.call("aria2.tellWaiting", [0, 100]))")
                answers.append("\(try await rpc.call("aria2.tellStopped", [0, 100]))")
                answers.append("\(try await rpc.call("aria2.getGlobalOption"))")
                answers.append("\(try await rpc.call("aria2.addUri", [["http://u:planted-bad@[::1"]]))")
                let token = try String(contentsOfFile: home + "/daemon.token", encoding: .utf8)
                    .trimmingCharacters(in: .whitespacesAndNewlines)
                var paths = ["/v1/tasks", "/v1/sessions", "/v1/status", "/v1/sessions/default/log?after=0"]
                paths += [failed[0].id, added[0].id].map { "/v1/tasks/\($0.uuidString)" }
                for path in paths {
                    var request = HTTPClientRequest(url: "http://\(listen)\(path)")
                    request.headers.add(name: "Authorization", value: "Bearer \(token)")
                    let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                    let body = try await response.body.collect(upTo: 16 << 20)
                    #expect(response.status == .ok, "\(path)")
                    answers.append(String(buffer: body))
                }
                #expect(answers.joined().contains("user:***@"), "the answers show the URLs, redacted")
                for answer in answers {
                    for secret in [
                        "planted-password", "planted-token", "planted-signature", "planted-user", "planted-access",
                        "planted-bad",
                    ] {
                        #expect(!answer.contains(secret), "\(answer.prefix(600))")
                    }
                }
            }
        }
    }

    @Test(
        "CORS only with --rpc-allow-origin-all: the header on answers, and the preflight allowed",
        arguments: StoreEngine.allCases
    )
    func crossOrigin(engine: StoreEngine) async throws {
        for allowed in [false, true] {
            try await Self.withHaul(on: engine, allowsAllOrigins: allowed) { haul, _ in
                var post = HTTPClientRequest(url: haul.url)
                post.method = .POST
                post.headers.add(name: "Origin", value: "http://ui.example")
                post.body = .bytes(ByteBuffer(string: #"{"jsonrpc":"2.0","id":1,"method":"system.listMethods"}"#))
                let answer = try await HTTPClient.shared.execute(post, timeout: .seconds(30))
                _ = try await answer.body.collect(upTo: 1 << 20)
                #expect(answer.headers["Access-Control-Allow-Origin"] == (allowed ? ["*"] : []))
                var preflight = HTTPClientRequest(url: haul.url)
                preflight.method = .OPTIONS
                preflight.headers.add(name: "Origin", value: "http://ui.example")
                preflight.headers.add(name: "Access-Control-Request-Method", value: "POST")
                preflight.headers.add(name: "Access-Control-Request-Headers", value: "content-type")
                let checked = try await HTTPClient.shared.execute(preflight, timeout: .seconds(30))
                _ = try await checked.body.collect(upTo: 1 << 20)
                #expect(checked.status.code == (allowed ? 200 : 403))
                if allowed {
                    #expect(checked.headers["Access-Control-Allow-Methods"] == ["POST, GET, OPTIONS"])
                    #expect(checked.headers["Access-Control-Allow-Headers"] == ["content-type"])
                }
            }
        }
    }

    @Test(
        "each method's answer has the shape of aria2c's own (keys and types), for the same calls",
        arguments: StoreEngine.allCases
    )
    func shapesMatchAria2(engine: StoreEngine) async throws {
        guard ExternalServer.aria2c != nil else {
            if ExternalServer.isCI { Issue.record("aria2c is not installed (Debian package aria2)") }
            return
        }
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 1 << 20, seed: 6))
            let url = JSONValue.string(server.url("/f.bin").absoluteString)
            try await ExternalServer.with(try await ExternalServer.startAria2RPC(secret: "s3cret-rpc")) { aria2 in
                let reference = Endpoint(url: "http://127.0.0.1:\(aria2.port)/jsonrpc", secret: "s3cret-rpc")
                try await Self.withHaul(on: engine) { haul, _ in
                    // The same calls on both: a paused download (so both stay put), then what
                    // clients ask of it and of the daemon.
                    var gids: [String] = []
                    for endpoint in [reference, haul] {
                        let gid = try await endpoint.result("aria2.addUri", [[url], ["pause": "true"]])
                        gids.append(try #require(gid.string))
                    }
                    let calls: [(String, (String) -> [JSONValue])] = [
                        ("aria2.getVersion", { _ in [] }),
                        ("aria2.getGlobalStat", { _ in [] }),
                        ("aria2.getUris", { [.string($0)] }),
                        (
                            "aria2.tellStatus",
                            { [.string($0), ["gid", "status", "totalLength", "completedLength", "dir"]] }
                        ),
                        ("aria2.tellWaiting", { _ in [0, 10, ["gid", "status", "downloadSpeed", "connections"]] }),
                        ("aria2.tellActive", { _ in [["gid"]] }),
                        ("aria2.tellStopped", { _ in [0, 10] }),
                        ("aria2.unpauseAll", { _ in [] }),
                        ("aria2.saveSession", { _ in [] }),
                        ("system.listNotifications", { _ in [] }),
                    ]
                    for (method, params) in calls {
                        let theirs = try await reference.result(method, params(gids[0]))
                        let ours = try await haul.result(method, params(gids[1]))
                        #expect(Self.shape(ours) == Self.shape(theirs), "\(method): Haul \(ours), aria2 \(theirs)")
                    }
                    // Errors too: a GID neither has.
                    let theirs = try await reference.call("aria2.tellStatus", ["0123456789abcdef"])
                    let ours = try await haul.call("aria2.tellStatus", ["0123456789abcdef"])
                    #expect(ours == theirs)
                }
            }
        }
    }
}
