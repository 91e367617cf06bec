import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import HaulDaemon

/// aria2's `changeUri` on Haul's tasks: the same calls answered as a real `aria2c
/// --enable-rpc` answers them (counts, the URI list after, the errors), then what Haul does
/// with the new list: a waiting download fetched from it, a running one continued from its
/// checkpoint from the new URL with a ranged request.
@Suite("aria2 changeUri", .serialized, .postgresServer, .timeLimit(.minutes(10)))
struct Aria2ChangeURITests {
    typealias Endpoint = Aria2RPCTests.Endpoint

    /// The URIs `getUris` lists.
    static func uris(_ endpoint: Endpoint, _ gid: String) async throws -> [String] {
        try await endpoint.result("aria2.getUris", [.string(gid)]).array?.compactMap { $0.object?["uri"]?.string } ?? []
    }

    @Test("the same changeUri calls give aria2c's answers and URI lists", arguments: StoreEngine.allCases)
    func sameAsAria2(engine: StoreEngine) async throws {
        guard ExternalServer.aria2c != nil else {
            if ExternalServer.isCI { Issue.record("aria2c is not installed (Debian package aria2)") }
            return
        }
        try await TestServer.withServer { server in
            for name in ["a", "b", "c", "d"] { server.set("/\(name).bin", .init(size: 200_000, seed: 11)) }
            let uri = { (name: String) in JSONValue.string(server.url("/\(name).bin").absoluteString) }
            let (a, b, c, d) = (uri("a"), uri("b"), uri("c"), uri("d"))
            try await ExternalServer.with(try await ExternalServer.startAria2RPC(secret: "s3cret-rpc")) { aria2 in
                let reference = Endpoint(url: "http://127.0.0.1:\(aria2.port)/jsonrpc", secret: "s3cret-rpc")
                try await Aria2RPCTests.withHaul(on: engine) { haul, _ in
                    var gids: [String] = []
                    for endpoint in [reference, haul] {
                        let gid = try await endpoint.result("aria2.addUri", [[a], ["pause": "true"]])
                        gids.append(try #require(gid.string))
                    }
                    let calls: [[JSONValue]] = [
                        [1, [], [b]],  // added at the end: [0, 1]
                        [1, [a], [c], 0],  // a removed, c first: [1, 1]
                        [1, ["http://127.0.0.1:1/not-there"], [d], 99],  // past the end: last
                        [2, [], [b]],  // fileIndex is out of range
                        [0, [], [b]],  // must be 1 or more
                        [1, [], [b], -1],  // position must be 0 or more
                        [1, "not a list", []],
                    ]
                    for params in calls {
                        let theirs = try await reference.call("aria2.changeUri", [.string(gids[0])] + params)
                        let ours = try await haul.call("aria2.changeUri", [.string(gids[1])] + params)
                        #expect(ours["result"] == theirs["result"], "\(params): Haul \(ours), aria2 \(theirs)")
                        #expect(ours["error"] == theirs["error"], "\(params): Haul \(ours), aria2 \(theirs)")
                        let (theirList, ourList) = (
                            try await Self.uris(reference, gids[0]), try await Self.uris(haul, gids[1])
                        )
                        #expect(ourList == theirList, "after \(params)")
                    }
                    #expect(try await Self.uris(haul, gids[1]) == [c, b, d].compactMap(\.string))
                }
            }
        }
    }

    @Test("what Haul cannot fetch is skipped, the last URI stays, and the download comes from the new list")
    func waitingDownloadUsesNewList() async throws {
        try await TestServer.withServer { server in
            server.set("/new.bin", .init(size: 300_000, seed: 12))
            try await Aria2RPCTests.withHaul(on: .sqlite) { haul, out in
                let gone = "http://127.0.0.1:1/gone.bin"
                let gid = try #require(
                    try await haul.result("aria2.addUri", [[.string(gone)], ["pause": "true"]]).string
                )
                let fresh = server.url("/new.bin").absoluteString
                // ftp and a text that is no URL are skipped, as aria2 skips what it cannot use;
                // Haul fetches http(s) only. The same URI twice is added once.
                let answer = try await haul.result(
                    "aria2.changeUri",
                    [
                        .string(gid), 1, [.string(gone)],
                        ["ftp://127.0.0.1/x", "no url", .string(fresh), .string(fresh)],
                    ]
                )
                #expect(answer == [1, 1])
                #expect(try await Self.uris(haul, gid) == [fresh])
                let last = try await haul.call("aria2.changeUri", [.string(gid), 1, [.string(fresh)], []])
                #expect(
                    last["error"]?.object?["message"]?.string?.contains("would have no URL left") == true,
                    "\(last)"
                )
                #expect(try await Self.uris(haul, gid) == [fresh], "a refused change changed nothing")
                // A list no download could hold is refused before any work on it. A thousand,
                // not more: the size of a body is the HTTP layer's bound (tested below), and a
                // list a hundred times larger only made both debug builds encode and parse
                // megabytes, which under a loaded CI outlasted the call's 30 s.
                let many = JSONValue.array((0..<1_000).map { .string("http://127.0.0.1:1/\($0)") })
                let tooMany = try await haul.call("aria2.changeUri", [.string(gid), 1, [], many])
                #expect(tooMany["error"]?.object?["message"]?.string?.contains("at most 16 URIs") == true, "\(tooMany)")
                #expect(try await Self.uris(haul, gid) == [fresh])
                // A body past 16 MiB is refused as it arrives, never parsed.
                let huge = Data(repeating: UInt8(ascii: " "), count: 17 << 20)
                let tooLarge = try await haul.post(data: huge)
                #expect(tooLarge.object?["error"]?.object?["message"] == "The request is too large", "\(tooLarge)")
                #expect(try await Self.uris(haul, gid) == [fresh])
                #expect(try await haul.result("aria2.unpause", [.string(gid)]) == .string(gid))
                #expect(
                    try await waitUntil {
                        try await haul.result("aria2.tellStatus", [.string(gid), ["status"]]) == ["status": "complete"]
                    }
                )
                let file = try #require(try FileManager.default.contentsOfDirectory(atPath: out).first)
                #expect(sha256(file: out + "/" + file) == server.sha256("/new.bin"))
            }
        }
    }

    @Test("a running download continues from its checkpoint from the new URL, with a ranged request")
    func runningDownloadSwitches() async throws {
        try await TestServer.withServer { server in
            // The old URL holds the download part of the way in; the new one serves the same file.
            server.set("/old.bin", .init(size: 2_000_000, seed: 13, holdAt: 600_000))
            server.set("/new.bin", .init(size: 2_000_000, seed: 13))
            try await Aria2RPCTests.withHaul(on: .sqlite) { haul, out in
                let old = server.url("/old.bin").absoluteString
                let gid = try #require(try await haul.result("aria2.addUri", [[.string(old)], ["split": "1"]]).string)
                #expect(
                    try await waitUntil {
                        let status = try await haul.result("aria2.tellStatus", [.string(gid), ["completedLength"]])
                        return Int(status.object?["completedLength"]?.string ?? "") ?? 0 >= 600_000
                    }
                )
                let fresh = server.url("/new.bin").absoluteString
                #expect(
                    try await haul.result("aria2.changeUri", [.string(gid), 1, [.string(old)], [.string(fresh)]]) == [
                        1, 1,
                    ]
                )
                #expect(
                    try await waitUntil {
                        try await haul.result("aria2.tellStatus", [.string(gid), ["status"]]) == ["status": "complete"]
                    }
                )
                server.release("/old.bin")
                let file = try #require(try FileManager.default.contentsOfDirectory(atPath: out).first)
                #expect(sha256(file: out + "/" + file) == server.sha256("/new.bin"))
                let ranges = server.requests(for: "/new.bin").compactMap { $0.header("Range") }
                #expect(ranges.count == 1 && ranges.first?.hasPrefix("bytes=0-") == false, "\(ranges)")
            }
        }
    }
}
