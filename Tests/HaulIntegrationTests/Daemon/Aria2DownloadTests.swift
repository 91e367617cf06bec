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

extension Aria2RPCTests {
    /// Downloads driven through aria2's methods: added, watched, paused, ordered.
    @Suite("aria2 JSON-RPC: downloads")
    struct Downloads {
        @Test(
            "addUri downloads the file: tellStatus goes to complete with the lengths, the file is right, tellStopped lists it",
            arguments: StoreEngine.allCases
        )
        func addURIToCompletion(engine: StoreEngine) async throws {
            try await TestServer.withServer { server in
                server.set("/a.bin", .init(size: 3 << 20, seed: 4))
                try await Aria2RPCTests.withHaul(on: engine) { haul, out in
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
                    try await Aria2RPCTests.withHaul(on: engine) { haul, out in
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
                // Held at 1 MiB until the test lets it go: active when it is paused, however slow the machine.
                server.set("/slow.bin", .init(size: 4 << 20, seed: 5, holdAt: 1 << 20))
                try await Aria2RPCTests.withHaul(on: engine) { haul, out in
                    let gid = try #require(
                        try await haul.result("aria2.addUri", [[.string(server.url("/slow.bin").absoluteString)]])
                            .string
                    )
                    #expect(
                        try await waitUntil {
                            try await haul.result("aria2.tellStatus", [.string(gid), ["status"]]) == [
                                "status": "active"
                            ]
                        }
                    )
                    #expect(try await haul.result("aria2.pause", [.string(gid)]) == .string(gid))
                    #expect(
                        try await waitUntil {
                            try await haul.result("aria2.tellWaiting", [0, 10, ["gid", "status"]])
                                == [["gid": .string(gid), "status": "paused"]]
                        }
                    )
                    server.release("/slow.bin")
                    #expect(try await haul.result("aria2.unpause", [.string(gid)]) == .string(gid))
                    #expect(
                        try await waitUntil {
                            try await haul.result("aria2.tellStatus", [.string(gid), ["status"]]) == [
                                "status": "complete"
                            ]
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
                try await Aria2RPCTests.withHaul(on: engine) { haul, _ in
                    #expect(
                        try await haul.result("aria2.changeGlobalOption", [["max-concurrent-downloads": "1"]]) == "OK"
                    )
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
                        try await haul.result("aria2.changePosition", [.string(b), .int(-1 << 62), "POS_CUR"])
                            == .int(0)
                    )
                    #expect(
                        try await haul.result("aria2.changePosition", [.string(b), .int(Int64.max), "POS_END"])
                            == .int(2)
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
            "tellWaiting and tellStopped windows, read from the store's index: from the front, past an offset, from the end backwards, out of range",
            arguments: StoreEngine.allCases
        )
        func windows(engine: StoreEngine) async throws {
            try await TestServer.withServer { server in
                try await Aria2RPCTests.withHaul(on: engine) { haul, _ in
                    func add(_ name: String, _ options: [String: JSONValue]) async throws -> String {
                        server.set("/\(name)", .init(size: 1_024, seed: UInt64(name.utf8.reduce(0) { $0 &+ $1 })))
                        let gid = try await haul.result(
                            "aria2.addUri",
                            [[.string(server.url("/\(name)").absoluteString)], .object(options)]
                        )
                        return try #require(gid.string)
                    }
                    var done: [String] = []
                    for name in ["c0", "c1", "c2"] { done.append(try await add(name, [:])) }
                    #expect(
                        try await waitUntil {
                            try await haul.result("aria2.tellStopped", [0, 10, ["gid"]]).array?.count == 3
                        }
                    )
                    var paused: [String] = []
                    for index in 0..<6 { paused.append(try await add("p\(index)", ["pause": "true"])) }
                    func window(_ method: String, _ offset: Int, _ count: Int) async throws -> [String] {
                        let answer = try await haul.result(method, [.int(Int64(offset)), .int(Int64(count)), ["gid"]])
                        return answer.array?.compactMap { $0.object?["gid"]?.string } ?? []
                    }
                    #expect(try await window("aria2.tellWaiting", 0, 2) == Array(paused[0..<2]))
                    #expect(try await window("aria2.tellWaiting", 2, 3) == Array(paused[2..<5]))
                    #expect(try await window("aria2.tellWaiting", 4, 100) == Array(paused[4...]))
                    #expect(try await window("aria2.tellWaiting", -1, 2) == [paused[5], paused[4]])
                    #expect(try await window("aria2.tellWaiting", -2, 10) == Array(paused[0...4].reversed()))
                    #expect(try await window("aria2.tellWaiting", 6, 1) == [])
                    #expect(try await window("aria2.tellWaiting", -7, 1) == [])
                    #expect(try await window("aria2.tellStopped", 0, 10) == done)
                    #expect(try await window("aria2.tellStopped", 1, 1) == [done[1]])
                    #expect(try await window("aria2.tellStopped", -1, 2) == [done[2], done[1]])
                    // The store's counts, as the windows list them.
                    let stat = try await haul.result("aria2.getGlobalStat")
                    #expect(
                        ["numActive", "numWaiting", "numStopped", "numStoppedTotal"].map { stat.object?[$0] }
                            == ["0", "6", "3", "3"],
                        "\(stat)"
                    )
                }
            }
        }
    }
}
