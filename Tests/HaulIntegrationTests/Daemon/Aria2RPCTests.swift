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

}
