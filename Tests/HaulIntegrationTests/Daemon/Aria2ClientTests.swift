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

extension Aria2RPCTests {
    /// aria2's own clients (aria2p, a raw WebSocket client) driving Haul, and aria2c's answers
    /// to the same calls beside Haul's.
    @Suite("aria2 JSON-RPC: aria2's clients and aria2c")
    struct Clients {
        @Test(
            "over WebSocket: answers to calls, and aria2's notifications in order — start, complete, pause, stop, error",
            arguments: StoreEngine.allCases
        )
        func webSocketNotifications(engine: StoreEngine) async throws {
            try await TestServer.withServer { server in
                server.set("/a.bin", .init(size: 1 << 20, seed: 7))
                // Held at 1 MiB until the server stops: under way for as long as the test takes.
                server.set("/slow.bin", .init(size: 8 << 20, seed: 8, holdAt: 1 << 20))
                try await Aria2RPCTests.withHaul(on: engine) { haul, out in
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

                    outbox.continuation.yield(
                        call("a", "aria2.addUri", [[.string(server.url("/a.bin").absoluteString)]])
                    )
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

                    outbox.continuation.yield(
                        call("e", "aria2.addUri", [[.string(server.url("/missing").absoluteString)]])
                    )
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
                // Held at 1 MiB until the server stops: a download that is under way whenever the script
                // pauses it, however slow the machine (a throttled one finished first under load).
                server.set("/slow.bin", .init(size: 16 << 20, seed: 12, holdAt: 1 << 20))
                server.set("/notify.bin", .init(size: 1 << 20, seed: 13))
                try await Aria2RPCTests.withHaul(on: engine) { haul, out in
                    let urls = ["/fast.bin", "/slow.bin", "/notify.bin"].map { server.url($0) }
                    guard let (status, output) = try await Self.runScript("drive.py", against: haul, urls) else {
                        return
                    }
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
                // Held at 1 MiB until the server stops: under way whenever the script pauses it.
                server.set("/slow.bin", .init(size: 16 << 20, seed: 42, holdAt: 1 << 20))
                try await Aria2RPCTests.withHaul(on: engine) { haul, out in
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
                    try await Aria2RPCTests.withHaul(on: engine) { haul, _ in
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
                            (
                                "aria2.tellWaiting",
                                { _ in [0, 10, ["gid", "status", "downloadSpeed", "connections"]] }
                            ),
                            ("aria2.tellActive", { _ in [["gid"]] }),
                            ("aria2.tellStopped", { _ in [0, 10] }),
                            ("aria2.unpauseAll", { _ in [] }),
                            ("aria2.saveSession", { _ in [] }),
                            ("system.listNotifications", { _ in [] }),
                        ]
                        for (method, params) in calls {
                            let theirs = try await reference.result(method, params(gids[0]))
                            let ours = try await haul.result(method, params(gids[1]))
                            #expect(
                                Aria2RPCTests.shape(ours) == Aria2RPCTests.shape(theirs),
                                "\(method): Haul \(ours), aria2 \(theirs)"
                            )
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
}
