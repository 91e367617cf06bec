import Foundation
import HaulPostgres
import HaulTestSupport
import HaulTesting
import HaulWire
import Logging
import Synchronization
import Testing

@testable import Haul

extension FleetManagerTests {
    /// The database going away and coming back, a pause from another node, and the fleet's limit lowered.
    @Suite("Fleet of managers: an outage, and changes from another node")
    struct Changes {
        @Test(
            "the database goes away while downloads run: they stop, an add is refused with a sentence; once it is back every download completes from its checkpoint, once"
        )
        func databaseOutage() async throws {
            let temp = try TemporaryDirectory()
            try await TestServer.withServer { server in
                // Sixteen seconds each at least, one connection each: a run that went on without
                // its store would fetch on.
                let size = 16 << 20
                for index in 0..<4 {
                    server.set("/f\(index)", .init(size: size, seed: UInt64(index), bytesPerSecond: 1 << 20))
                }
                server.set("/late", .init(size: 1_000, seed: 9))
                // A server of its own: this test stops it.
                try await PostgresServer.with { database in
                    let location = try await database.newDatabase()
                    let node = try await PostgresStore.connect(
                        to: location,
                        node: "a",
                        leaseDuration: .seconds(5),
                        logger: StoreEngine.logger
                    )
                    try await DownloadManager.withDownloadManager(
                        configuration: FleetManagerTests.configuration(node, limit: 2)
                    ) { manager in
                        let completions = CompletionCount()
                        let events = manager.events()
                        let watcher = Task {
                            for await event in events { if case .completed(let id, _) = event { completions.add(id) } }
                        }
                        defer { watcher.cancel() }
                        let added = try await manager.download(
                            (0..<4).map {
                                var request = DownloadRequest(
                                    url: server.url("/f\($0)"),
                                    destination: .directory(temp.path)
                                )
                                request.connections = 1
                                return request
                            }
                        )
                        // Two run, each with a checkpoint past the 64 KiB a resume fetches again to
                        // compare (below it, a resume asks from byte 0).
                        #expect(
                            try await waitUntil(timeout: .seconds(60)) {
                                let infos = try await node.infos(ids: nil, background: true, session: nil)
                                return infos.filter { $0.state == .running && $0.bytesCommitted > 1 << 20 }.count == 2
                            }
                        )

                        // (A loaded machine may have stopped and resumed a run before: what counts
                        // is from here.)
                        let requestsBefore = (0..<4).map { server.requests(for: "/f\($0)").count }
                        await database.stop()
                        // Counted from when the database is gone: its shutdown (a checkpoint of its
                        // own) takes seconds on a loaded machine, and the leases were renewed meanwhile.
                        let sentBefore = (0..<4).map { server.bodyBytesSent("/f\($0)") }
                        // An add waits for the database, then — a minute on — is refused, in a sentence.
                        let late = Task {
                            await expectHaulError(.store) {
                                _ = try await manager.download(
                                    DownloadRequest(url: server.url("/late"), destination: .directory(temp.path))
                                )
                            }
                        }
                        // The leases run out unrenewed (5 s): the transfers stop, long before their
                        // files' ends, and before another node could take the tasks over.
                        #expect(try await waitUntil(timeout: .seconds(30)) { server.activeResponses == 0 })
                        #expect(try await waitUntil(timeout: .seconds(30)) { await manager.runningTaskIDs.isEmpty })
                        for index in 0..<4 {
                            // At 1 MiB/s, at most a lease's worth (5 s) and the watch's look, not the
                            // rest of the file.
                            #expect(server.bodyBytesSent("/f\(index)") - sentBefore[index] < size / 2, "f\(index)")
                        }
                        let refused = await late.value
                        // Refused in one sentence: the pool's (no connection for a minute), or — when
                        // the add took a pooled connection the shutdown had just ended — the server's,
                        // or Haul's own for a connection found closed (by the server, or by the
                        // client once it saw the server gone).
                        let message = refused?.description ?? ""
                        #expect(
                            message.hasPrefix("Cannot record a download in PostgreSQL: ")
                                && (message.contains("PostgreSQL running and reachable")
                                    || message.contains("terminating connection")
                                    || message.contains("the connection to the database failed or was closed")
                                    || message.contains(
                                        "the database had closed the connection (it was restarted or stopped"
                                    )),
                            "\(message)"
                        )
                        #expect(!message.contains("PSQLError") && !message.contains("ConnectionPool"), "\(message)")

                        for index in 0..<4 { server.update("/f\(index)") { $0.bytesPerSecond = 4 << 20 } }
                        try await database.restart()
                        // (The database client tries again after a growing pause, up to a minute.)
                        let done = try await waitUntil(timeout: .seconds(240)) {
                            guard let infos = try? await node.infos(ids: nil, background: true, session: nil) else {
                                return false
                            }
                            return infos.count == 4 && infos.allSatisfy { $0.state == .completed }
                        }
                        let states = try await node.infos(ids: nil, background: true, session: nil).map(\.state)
                        if !done {
                            // What the node holds, for the cause (a task left queued here once, under load).
                            let entries = try await node.fleet.report.entries().map {
                                "\($0.id.uuidString.prefix(4)) \($0.state) \($0.owner ?? "-") fence \($0.fence)"
                            }
                            Issue.record(
                                """
                                not all completed: \(states); running here \(await manager.runningTaskIDs), \
                                waiting here \(await manager.waitingTaskIDs), leases held \(added.map { node.holdsClaim($0.id) }), \
                                queue \(entries), nodes \(try await node.fleet.report.nodes().map(\.name))
                                """
                            )
                        }
                        for index in 0..<4 {
                            #expect(sha256(file: temp.file("f\(index)")) == server.sha256("/f\(index)"))
                            // Since the outage, only requests from a recorded checkpoint: what was kept
                            // was not fetched again.
                            let later = server.requests(for: "/f\(index)").dropFirst(max(1, requestsBefore[index]))
                            #expect(
                                later.allSatisfy { ($0.header("Range") ?? "bytes=0-") != "bytes=0-" },
                                "f\(index): \(server.requests(for: "/f\(index)").map { $0.header("Range") ?? "whole" })"
                            )
                        }
                        #expect(try await waitUntil { completions.all.count == 4 })
                        #expect(
                            completions.all.count == 4 && Set(completions.all) == Set(added.map(\.id)),
                            "\(completions.all)"
                        )
                        #expect(!FileManager.default.fileExists(atPath: temp.file("late")))
                    }
                    try await node.closeDatabase()
                }
            }
        }

        @Test(
            "a pause given to another node reaches the running node at once, by the fleet's notifications, not at its next write or heartbeat"
        )
        func pauseArrivesAtOnce() async throws {
            let temp = try TemporaryDirectory()
            try await TestServer.withServer { server in
                server.set("/p", .init(size: 16 << 20, seed: 3, bytesPerSecond: 256 << 10))
                // A heartbeat every 40 s and a checkpoint every two minutes: without a
                // notification, b would go on writing for at least 40 s.
                try await FleetManagerTests.withNodes(["a", "b"], lease: .seconds(120)) { nodes in
                    let a = try DownloadManager(configuration: FleetManagerTests.configuration(nodes[0], limit: 4))
                    let b = FleetManagerTests.configuration(nodes[1], limit: 4, checkpoints: .seconds(120))
                    try await DownloadManager.withDownloadManager(configuration: b) { b in
                        let events = b.events()
                        let told = StateLog()
                        let watcher = told.record(events)
                        defer { watcher.cancel() }
                        let p = try await b.download(
                            DownloadRequest(url: server.url("/p"), destination: .directory(temp.path))
                        )
                        #expect(
                            try await waitUntil {
                                server.activeResponses == 1 && told.contains(p.id, .running, .started)
                            }
                        )
                        let aRuns = Task { try await a.run() }
                        defer { aRuns.cancel() }
                        _ = try await a.pause(p.id)
                        #expect(
                            try await waitUntil(timeout: .seconds(20)) { told.contains(p.id, .paused, .revoked) },
                            "\(told.all)"
                        )
                        #expect(try await waitUntil(timeout: .seconds(20)) { server.activeResponses == 0 })
                        #expect(try await nodes[0].task(id: p.id)?.state == .paused)
                        await a.shutdown()
                        try await aRuns.value
                    }
                }
            }
        }

        @Test(
            "a node's own limit lowered: its most recently started download goes back to the fleet's queue, and a node with room continues it from its checkpoint"
        )
        func loweringANodesOwnLimit() async throws {
            let temp = try TemporaryDirectory()
            try await TestServer.withServer { server in
                for index in 0..<3 {
                    server.set("/n\(index)", .init(size: 16 << 20, seed: UInt64(60 + index), bytesPerSecond: 256 << 10))
                }
                try await FleetManagerTests.withNodes(["a", "b"]) { nodes in
                    // a alone, at 2: it takes the first two; then b, at 2: the third.
                    let a = try DownloadManager(configuration: FleetManagerTests.configuration(nodes[0], limit: 2))
                    let aRuns = Task { try await a.run() }
                    defer { aRuns.cancel() }
                    let ids = try await a.download(
                        (0..<3).map { DownloadRequest(url: server.url("/n\($0)"), destination: .directory(temp.path)) }
                    ).map(\.id)
                    #expect(try await waitUntil { await a.runningTaskIDs.count == 2 })
                    try await DownloadManager.withDownloadManager(
                        configuration: FleetManagerTests.configuration(nodes[1], limit: 2)
                    ) { b in
                        #expect(try await waitUntil { await b.runningTaskIDs == [ids[2]] })
                        #expect(
                            try await waitUntil {
                                try await nodes[0].infos(ids: ids, background: true, session: nil)
                                    .allSatisfy { $0.bytesCommitted > 0 }
                            }
                        )
                        // a lowered to 1: the one it started last goes back to the queue, not
                        // to a's own line; b, with room, takes it and continues it.
                        let last = try #require(
                            try await nodes[0].infos(ids: ids, background: true, session: nil)
                                .first { $0.id == ids[1] }
                        )
                        // Its next response at full speed: the continued run ends soon.
                        server.update("/n1") { $0.bytesPerSecond = nil }
                        try await a.setMaxConcurrentDownloads(1)
                        #expect(try await waitUntil { try await nodes[0].task(id: ids[1])?.state == .completed })
                        // Completed in the store a moment before b's run of it has ended there.
                        #expect(try await waitUntil { await b.runningTaskIDs == [ids[2]] })
                        #expect(await a.runningTaskIDs == [ids[0]])
                        #expect(sha256(file: temp.file("n1")) == server.sha256("/n1"))
                        // Continued from a's checkpoint: b's request for it was ranged.
                        let range = server.requests(for: "/n1").last?.header("Range") ?? ""
                        #expect(range.hasPrefix("bytes=") && !range.hasPrefix("bytes=0-"), "\(range)")
                        #expect(last.bytesCommitted > 0)
                        // Each run on a node holding it: a ran 0 and 1, b ran 1 and 2.
                        let entries = try await nodes[0].fleet.report.entries()
                        #expect(entries.first { $0.id == ids[1] }?.fence == 2)
                        // The two still at a minute's pace are not waited for.
                        try await a.cancel(ids[0])
                        try await b.cancel(ids[2])
                    }
                    await a.shutdown()
                    try await aRuns.value
                }
            }
        }

        @Test(
            "lowering the fleet's cap live sends the most recently started tasks back to waiting, on whichever node runs them"
        )
        func loweringTheFleetsCap() async throws {
            let temp = try TemporaryDirectory()
            try await TestServer.withServer { server in
                // A minute each at first: none can end before the limit is lowered, however
                // loaded the machine; full speed once the test has seen what goes back.
                for index in 0..<4 {
                    server.set("/l\(index)", .init(size: 16 << 20, seed: UInt64(40 + index), bytesPerSecond: 256 << 10))
                }
                try await FleetManagerTests.withNodes(["a", "b"]) { nodes in
                    // b alone, at 2: it takes the first two. Then a, at 4: the other two (all
                    // that waits). Each runs two.
                    let b = try DownloadManager(configuration: FleetManagerTests.configuration(nodes[1], limit: 2))
                    let bRuns = Task { try await b.run() }
                    defer { bRuns.cancel() }
                    let added = try await b.download(
                        (0..<4).map { DownloadRequest(url: server.url("/l\($0)"), destination: .directory(temp.path)) }
                    )
                    let ids = added.map(\.id)
                    #expect(try await waitUntil { await b.runningTaskIDs.count == 2 })
                    try await DownloadManager.withDownloadManager(
                        configuration: FleetManagerTests.configuration(nodes[0], limit: 4)
                    ) {
                        a in
                        #expect(
                            try await waitUntil { await a.runningTaskIDs.count == 2 && server.activeResponses == 4 }
                        )
                        #expect(Set(await b.runningTaskIDs) == Set(ids[0..<2]))
                        #expect(Set(await a.runningTaskIDs) == Set(ids[2..<4]))
                        #expect(
                            try await waitUntil {
                                try await nodes[0].infos(ids: ids, background: true, session: nil)
                                    .allSatisfy { $0.bytesCommitted > 0 }
                            }
                        )

                        // The fleet capped at 2: neither node runs more than its own limit, so
                        // only the fleet can say which go back — the two started last, on a.
                        try await nodes[0].saveFleetCaps(API.FleetCaps(maxConcurrentDownloads: 2))
                        try await a.sendBackOverCaps()
                        #expect(try await waitUntil { await a.runningTaskIDs.isEmpty && server.activeResponses == 2 })
                        #expect(Set(await b.runningTaskIDs) == Set(ids[0..<2]))
                        let entries = try await nodes[0].fleet.report.entries()
                        #expect(entries.filter { ids[2..<4].contains($0.id) }.allSatisfy { $0.state == "queued" })

                        // Raised again: the two sent back continue from their checkpoints (at full
                        // speed now), and end whole.
                        for index in 0..<4 { server.update("/l\(index)") { $0.bytesPerSecond = nil } }
                        try await nodes[0].saveFleetCaps(API.FleetCaps(maxConcurrentDownloads: 0))
                        #expect(
                            try await waitUntil(timeout: .seconds(120)) {
                                try await nodes[0].infos(ids: Array(ids[2..<4]), background: true, session: nil)
                                    .allSatisfy { $0.state == .completed }
                            }
                        )
                        for index in 2..<4 {
                            #expect(sha256(file: temp.file("l\(index)")) == server.sha256("/l\(index)"))
                            #expect(
                                server.requests(for: "/l\(index)").last?.header("Range")?.hasPrefix("bytes=") == true
                            )
                        }
                        // The first two, still at a minute's pace, are not waited for.
                        try await b.cancel(ids[0])
                        try await b.cancel(ids[1])
                    }
                    await b.shutdown()
                    try await bRuns.value
                }
            }
        }
    }
}
