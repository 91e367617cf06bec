import AsyncHTTPClient
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Logging
import Testing

@Suite("Daemon", .postgresServer, .timeLimit(.minutes(10))) struct DaemonTests {
    @Test("every operation round-trips through the socket", arguments: StoreEngine.allCases)
    func roundTrips(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            server.set("/done", .init(size: 300_000, seed: 1))
            // Held a quarter of the way in (a resume past that, at once) until the test lets them
            // go: none completes before the operations on them, however slow the machine (a
            // loaded run once saw s0 complete before its pause).
            for name in ["s0", "s1", "s2"] {
                server.set("/\(name)", .init(size: 4_000_000, seed: 9, bytesPerSecond: 400_000, holdAt: 1_000_000))
            }
            try await withDaemon(on: engine, home: temp.file("home"), maxConcurrent: 2) { client, _ in
                let first = try await client.add([
                    DownloadRequest(url: server.url("/done"), destination: .directory(out), session: "one")
                ])
                #expect(first.count == 1 && first[0].session == "one")
                #expect(try await waitUntil { try await client.info(first[0].id).state == .completed })
                #expect(sha256(file: out + "/done") == server.sha256("/done"))

                let slow = try await client.add(
                    ["s0", "s1", "s2"].map {
                        DownloadRequest(url: server.url("/\($0)"), destination: .directory(out), session: "two")
                    }
                )
                // A re-add finds the same tasks.
                let again = try await client.add([
                    DownloadRequest(url: server.url("/s0"), destination: .directory(out), session: "two")
                ])
                #expect(again.map(\.id) == [slow[0].id])
                #expect(try await client.tasks(session: "two").map(\.id) == slow.map(\.id))
                #expect(try await client.tasks().count == 4)
                #expect(try await waitUntil { try await client.status().running == 2 })
                #expect(try await client.status().waiting == 1)

                // Limits change live: 2 → 1 sends the newer running task back to waiting.
                let settings = try await client.update(API.Settings(maxConcurrentDownloads: 1))
                #expect(settings.maxConcurrentDownloads == 1)
                #expect(try await waitUntil { try await client.status().running == 1 })
                #expect(try await client.info(slow[0].id).state == .running)

                // Rate limits change live: the overall one, and each task's.
                #expect(try await client.update(API.Settings(overallRateLimit: 1 << 20)).overallRateLimit == 1 << 20)
                #expect(try await client.settings().overallRateLimit == 1 << 20)
                let limited = try await client.setRateLimit(512 << 10, .session("two"))
                #expect(Set(limited.map(\.id)) == Set(slow.map(\.id)))
                #expect(limited.allSatisfy { $0.rateLimit == 512 << 10 })
                await #expect(throws: HaulError.self) { try await client.setRateLimit(1, .tasks([UUID()])) }
                #expect(try await client.update(API.Settings(overallRateLimit: 0)).overallRateLimit == 0)

                let paused = try await client.pause(.tasks([slow[0].id]))
                #expect(paused.map(\.state) == [.paused])
                #expect(try await waitUntil { try await client.info(slow[1].id).state == .running })
                // Pausing it again changes nothing and is no error: none is answered as paused now.
                #expect(try await client.pause(.tasks([slow[0].id])).isEmpty)
                #expect(try await client.info(slow[0].id).state == .paused)
                let resumed = try await client.resume(.session("two"))
                #expect(resumed.map(\.id) == [slow[0].id])
                // Resuming a queued or running task, and cancelling a cancelled one, change nothing.
                #expect(try await client.resume(.tasks([slow[0].id])).isEmpty)
                let cancelled = try await client.cancel(.session("two"))
                #expect(Set(cancelled.map(\.id)) == Set(slow.map(\.id)))
                #expect(try await client.cancel(.tasks([slow[0].id])).isEmpty)
                #expect(try await client.info(slow[0].id).state == .cancelled)
                server.release()
                #expect(!FileManager.default.fileExists(atPath: out + "/s1.part"))
                let removed = try await client.remove(.session("two"))
                #expect(removed.count == 3)
                #expect(try await client.tasks().map(\.id) == [first[0].id])

                let status = try await client.status()
                #expect(status.pid == getpid())
                #expect(status.tasks == ["completed": 1])
                #expect(status.socket == temp.file("home") + "/daemon.sock")
                #expect(try await client.sessions().map(\.name).contains("one"))

                // Bad input: a clear error, nothing added.
                do {
                    _ = try await client.add([
                        DownloadRequest(url: URL(string: "ftp://example.org/x")!, destination: .directory(out))
                    ])
                    Issue.record("an ftp URL was accepted")
                } catch let error as HaulError {
                    #expect(error.code == .unsupportedScheme)
                    #expect(error.status == 400)
                }
                do {
                    _ = try await client.info(UUID())
                    Issue.record("an unknown task was found")
                } catch let error as HaulError {
                    #expect(error.status == 404)
                }
                #expect(try await client.tasks().count == 1)
            }
        }
    }

    @Test("socket 0600 in a 0700 home; a second daemon on the same home refuses", arguments: StoreEngine.allCases)
    func privateSocketAndOneDaemon(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        try FileManager.default.createDirectory(
            atPath: home,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o755]
        )
        // A stale socket, as a killed daemon leaves: bound, then closed without unlinking.
        try makeStaleSocket(home + "/daemon.sock")
        try await withDaemon(on: engine, home: home) { client, _ in
            let socketMode =
                try FileManager.default.attributesOfItem(atPath: home + "/daemon.sock")[.posixPermissions] as? Int
            let homeMode = try FileManager.default.attributesOfItem(atPath: home)[.posixPermissions] as? Int
            #expect(socketMode == 0o600)
            #expect(homeMode == 0o700)
            let second = DaemonService(configuration: .init(home: HaulHome(path: home)))
            do {
                try await second.run()
                Issue.record("a second daemon ran")
            } catch let error as HaulError {
                #expect(error.code == .busy)
                #expect(error.description.contains("already running"))
                #expect(error.description.contains("pid \(getpid())"))
            }
            // The first still answers.
            #expect(try await client.status().pid == getpid())
        }
        #expect(!FileManager.default.fileExists(atPath: home + "/daemon.sock"), "a clean stop removes the socket")
    }

    @Test("the TCP listener answers only requests with the token", arguments: StoreEngine.allCases)
    func tcpNeedsToken(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        try await withDaemon(on: engine, home: home, listen: ("127.0.0.1", 0)) { client, _ in
            #expect(try await waitUntil { try await client.status().listen != nil })
            let listen = try #require(try await client.status().listen)
            let port = try #require(Int(listen.split(separator: ":").last ?? ""))
            let token = try String(contentsOfFile: home + "/daemon.token", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            let tokenMode =
                try FileManager.default.attributesOfItem(atPath: home + "/daemon.token")[.posixPermissions] as? Int
            #expect(tokenMode == 0o600)
            #expect(token.count == 64)

            let wrong = HaulClient(host: "127.0.0.1", port: port, token: String(repeating: "0", count: 64))
            do {
                _ = try await wrong.tasks()
                Issue.record("a request without the right token was served")
            } catch let error as HaulError {
                #expect(error.status == 401)
            }
            try await wrong.shutdown()

            let right = HaulClient(host: "127.0.0.1", port: port, token: token)
            #expect(try await right.status().pid == getpid())
            try await right.shutdown()
        }
    }

    @Test(
        "a client that reattaches gets exactly the events it missed, once, in order, of its session only",
        arguments: StoreEngine.allCases
    )
    func reattach(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            for index in 0..<3 { server.set("/a\(index)", .init(size: 200_000 * (index + 1), seed: UInt64(index))) }
            server.set("/b", .init(size: 100_000, seed: 7))
            let home = temp.file("home")
            var added: [DownloadInfo] = []
            // The first client adds and goes away; nobody listens while the tasks finish.
            try await withDaemon(on: engine, home: home, maxConcurrent: 1) { client, _ in
                added = try await client.add(
                    (0..<3).map {
                        DownloadRequest(url: server.url("/a\($0)"), destination: .directory(out), session: "backup")
                    }
                )
                _ = try await client.add([
                    DownloadRequest(url: server.url("/b"), destination: .directory(out), session: "other")
                ])
                #expect(try await waitUntil { try await client.tasks().allSatisfy { $0.state == .completed } })
            }
            // A new daemon and a new client: the log survived the restart.
            try await withDaemon(on: engine, home: home) { client, _ in
                var seen: [EventRecord] = []
                for try await record in client.attach(session: "backup") {
                    #expect(record.session == "backup")
                    seen.append(record)
                    if seen.filter({ $0.kind == .completed }).count == 3 {
                        try await client.acknowledge(session: "backup", through: record.eventID ?? 0)
                        break
                    }
                }
                let completed = seen.filter { $0.kind == .completed }
                // One at a time, in the order added.
                #expect(completed.map(\.taskID) == added.map(\.id))
                #expect(completed.map(\.path) == (0..<3).map { out + "/a\($0)" })
                let ids = seen.compactMap(\.eventID)
                #expect(ids == ids.sorted() && Set(ids).count == ids.count, "increasing ids, no duplicates")
                #expect(seen.map(\.kind).filter { $0 == .added }.count == 3)
                // Once: nothing of it is told again.
                #expect(try await client.loggedEvents(session: "backup").isEmpty)
                let other = try await client.loggedEvents(session: "other")
                #expect(other.map(\.kind) == [.added, .state, .state, .completed])
                #expect(other.allSatisfy { $0.session == "other" })
                // Tasks finished under the previous daemon can still be removed, files too.
                let removed = try await client.remove(.session("other"), deleteFiles: true)
                #expect(removed.map(\.state) == [.completed])
                #expect(!FileManager.default.fileExists(atPath: out + "/b"))
                #expect(FileManager.default.fileExists(atPath: out + "/a0"))
            }
            for index in 0..<3 { #expect(sha256(file: out + "/a\(index)") == server.sha256("/a\(index)")) }
        }
    }
}

extension DaemonTests {
    @Test("Last-Event-ID acknowledges up to that id and the stream goes on after it", arguments: StoreEngine.allCases)
    func lastEventIDHeader(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let home = temp.file("home")
        try await TestServer.withServer { server in
            server.set("/f", .init(size: 50_000, seed: 4))
            try await withDaemon(on: engine, home: home) { client, _ in
                let task = try await client.add([DownloadRequest(url: server.url("/f"), destination: .directory(out))])[
                    0
                ]
                #expect(try await waitUntil { try await client.info(task.id).state == .completed })
                // (The log is written just after the state: wait for its last event.)
                var logged: [EventRecord] = []
                #expect(
                    try await waitUntil {
                        logged = try await client.loggedEvents(session: "default")
                        return logged.contains { $0.kind == .completed }
                    }
                )
                #expect(logged.map(\.kind) == [.added, .state, .state, .completed])
                let ids = logged.compactMap(\.eventID)

                let http = HTTPClient(eventLoopGroupProvider: .singleton)
                let socket = (home + "/daemon.sock").addingPercentEncoding(withAllowedCharacters: .alphanumerics)!
                var request = HTTPClientRequest(url: "http+unix://\(socket)/v1/sessions/default/events")
                request.headers.add(name: "Last-Event-ID", value: "\(ids[1])")
                let response = try await http.execute(request, timeout: .seconds(10))
                #expect(response.status == .ok)
                #expect(response.headers.first(name: "Content-Type") == "text/event-stream")
                var text = ""
                for try await buffer in response.body {
                    text += String(buffer: buffer)
                    if text.components(separatedBy: "\n\n").filter({ $0.hasPrefix("id: ") }).count == 2 { break }
                }
                try await http.shutdown()
                let received = text.components(separatedBy: "\n").filter { $0.hasPrefix("id: ") }
                #expect(received == ["id: \(ids[2])", "id: \(ids[3])"])
                #expect(text.contains("event: completed\ndata: {"))
                // Acknowledged through ids[1]: those two are gone for every later client.
                #expect(try await client.loggedEvents(session: "default").compactMap(\.eventID) == Array(ids[2...]))
            }
        }
    }
}
