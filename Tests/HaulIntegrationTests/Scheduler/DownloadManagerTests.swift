import Foundation
import HaulClient
import HaulPostgres
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Synchronization
import Testing

@testable import Haul

/// The manager against the test server: limits really enforced, exact orders, operations,
/// restart recovery and events.
@Suite("DownloadManager", .postgresServer, .timeLimit(.minutes(10)))
struct DownloadManagerTests {
    @Test(
        "at most N downloads at once, as the server sees it, and all complete with the right bytes",
        arguments: StoreEngine.allCases
    )
    func limitIsEnforced(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "s.sqlite") { location in
            try await TestServer.withServer { server in
                // Each response waits a quarter of the way in until the test lets it go, so
                // the test sees the limit while downloads run, however slow the machine.
                for index in 0..<8 {
                    server.set("/f\(index)", .init(size: 1 << 20, seed: UInt64(index), holdAt: 256 << 10))
                }
                var configuration = ManagerFixtures.configuration(location, limit: 3)
                // Held responses are silent on purpose; no read timeout is wanted here.
                configuration.downloader.readTimeout = .seconds(3600)
                try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                    _ = try await manager.download(
                        (0..<8).map { DownloadRequest(url: server.url("/f\($0)"), destination: .directory(temp.path)) }
                    )
                    // Let them go one at a time, in order: each that ends makes room for the
                    // next in the queue, and never more than three are under way.
                    for index in 0..<8 {
                        let running = min(3, 8 - index)
                        let ready = try await waitUntil(timeout: .seconds(60)) {
                            let completed = try await manager.tasks().filter { $0.state == .completed }.count
                            return completed == index && server.heldResponses == running
                                && server.requests.count == min(8, index + 3)
                        }
                        let states = try await manager.tasks().map { "\($0.url.lastPathComponent) \($0.state)" }
                        #expect(ready, "before f\(index) is let go: \(states), \(server.requests.count) requests")
                        #expect(states.filter { $0.hasSuffix(" running") }.count == running, "\(states)")
                        server.release("/f\(index)")
                    }
                    #expect(
                        try await waitUntil(timeout: .seconds(60)) {
                            try await manager.tasks().allSatisfy { $0.state == .completed }
                        }
                    )
                }
                #expect(server.maxActiveResponses == 3)
                for index in 0..<8 {
                    #expect(sha256(file: temp.file("f\(index)")) == server.sha256("/f\(index)"))
                    #expect(server.requests(for: "/f\(index)").count == 1)
                }
            }
        }
    }

    @Test("the per-host cap holds while another host's tasks run", arguments: StoreEngine.allCases)
    func perHostCap(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "s.sqlite") { location in
            try await TestServer.withServer { one in
                try await TestServer.withServer { two in
                    // Each response waits a quarter of the way in until the test lets it go:
                    // a host's first two are under way together however slow the machine, and
                    // the cap is seen while they are (not inferred from throttled timing).
                    for index in 0..<4 {
                        one.set("/a\(index)", .init(size: 1 << 20, seed: UInt64(index), holdAt: 256 << 10))
                        two.set("/b\(index)", .init(size: 1 << 20, seed: UInt64(index + 10), holdAt: 256 << 10))
                    }
                    var configuration = ManagerFixtures.configuration(location, limit: 10, perHost: 2)
                    // Held responses are silent on purpose; no read timeout is wanted here.
                    configuration.downloader.readTimeout = .seconds(3600)
                    try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                        _ = try await manager.download(
                            (0..<4).flatMap { index in
                                [
                                    DownloadRequest(url: one.url("/a\(index)"), destination: .directory(temp.path)),
                                    DownloadRequest(url: two.url("/b\(index)"), destination: .directory(temp.path)),
                                ]
                            }
                        )
                        #expect(
                            try await waitUntil(timeout: .seconds(60)) {
                                one.heldResponses == 2 && two.heldResponses == 2
                            }
                        )
                        // Two of each host's four run, the other two wait, and no third request came.
                        let states = try await manager.tasks().map { "\($0.url.lastPathComponent) \($0.state)" }
                        #expect(
                            states.sorted() == [
                                "a0 running", "a1 running", "a2 queued", "a3 queued",
                                "b0 running", "b1 running", "b2 queued", "b3 queued",
                            ]
                        )
                        #expect(one.requests.count == 2 && two.requests.count == 2)
                        one.release()
                        two.release()
                        #expect(
                            try await waitUntil(timeout: .seconds(60)) {
                                try await manager.tasks().allSatisfy { $0.state == .completed }
                            }
                        )
                    }
                    #expect(one.maxActiveResponses == 2)
                    #expect(two.maxActiveResponses == 2)
                    for index in 0..<4 {
                        #expect(sha256(file: temp.file("a\(index)")) == one.sha256("/a\(index)"))
                        #expect(sha256(file: temp.file("b\(index)")) == two.sha256("/b\(index)"))
                    }
                }
            }
        }
    }

    @Test(
        "the design's example live: 5 running, limit lowered to 2; the 3 newest wait with their data",
        arguments: StoreEngine.allCases
    )
    func lowerLimitLive(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "s.sqlite") { location in
            try await TestServer.withServer { server in
                let names = ["A", "B", "C", "D", "E", "F"]
                // Each response waits a quarter of the way in until the test lets it go: all five
                // are under way together however slow the machine (throttled, a loaded machine
                // once saw A end before E began, and once A and B not end in a minute).
                for (index, name) in names.enumerated() {
                    server.set("/\(name)", .init(size: 1 << 20, seed: UInt64(index), holdAt: 256 << 10))
                }
                var configuration = ManagerFixtures.configuration(location, limit: 5)
                // Held responses are silent on purpose; no read timeout is wanted here.
                configuration.downloader.readTimeout = .seconds(3600)
                try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                    var ids: [String: UUID] = [:]
                    for name in names {
                        ids[name] = try await manager.download(
                            DownloadRequest(url: server.url("/\(name)"), destination: .directory(temp.path))
                        ).id
                    }
                    let name = { (id: UUID) in ids.first { $0.value == id }!.key }
                    #expect(await manager.runningTaskIDs.map(name) == ["A", "B", "C", "D", "E"])
                    #expect(try await waitUntil { server.activeResponses == 5 })
                    // Data must have reached each download before it can keep it (on a busy
                    // machine the server starts sending well before the client reads).
                    #expect(
                        try await waitUntil {
                            var received: [Int64] = []
                            for id in await manager.runningTaskIDs {
                                received.append(await manager.progress(of: id)?.bytesReceived ?? 0)
                            }
                            return received.count == 5 && received.allSatisfy { $0 > 64 << 10 }
                        }
                    )
                    // Told through events, which are never lost: on a loaded machine A and B may end
                    // and C start again before a poll of the states would see all three waiting.
                    let requeued = ManagerFixtures.Recorder(manager.events(), state: .queued)
                    try await manager.setMaxConcurrentDownloads(2)
                    #expect(await manager.runningTaskIDs.map(name) == ["A", "B"])
                    #expect(await manager.waitingTaskIDs.map(name) == ["C", "D", "E", "F"])
                    for yielded in ["C", "D", "E"] { #expect(try await requeued.waitUntilTold(ids[yielded]!)) }
                    #expect(requeued.ids.map(name).sorted() == ["C", "D", "E"])
                    // Each kept its data (committed bytes only grow, whatever runs since).
                    let kept = try await manager.tasks().filter { ["C", "D", "E"].contains(name($0.id)) }
                    #expect(kept.count == 3 && kept.allSatisfy { $0.bytesCommitted > 0 })
                    server.release()
                    #expect(try await waitUntil { try await manager.tasks().allSatisfy { $0.state == .completed } })
                }
                for name in names { #expect(sha256(file: temp.file(name)) == server.sha256("/\(name)")) }
                // C, D and E continued from their checkpoints.
                for name in ["C", "D", "E"] {
                    #expect(server.requests(for: "/\(name)").last?.header("Range")?.hasPrefix("bytes=") == true)
                }
            }
        }
    }

    @Test("tasks start in queue order, one at a time, and a priority moves one ahead", arguments: StoreEngine.allCases)
    func startOrder(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "s.sqlite") { location in
            try await TestServer.withServer { server in
                // A waits part of the way in until all four are queued: B cannot start before D
                // is added, however slow the machine.
                server.set("/A", .init(size: 500_000, holdAt: 100_000))
                for name in ["B", "C", "D"] { server.set("/\(name)", .init(size: 500_000)) }
                var configuration = ManagerFixtures.configuration(location, limit: 1)
                configuration.downloader.readTimeout = .seconds(3600)  // A is held on purpose.
                try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                    let recorder = ManagerFixtures.Recorder(manager.events(), state: .running)
                    var ids: [String: UUID] = [:]
                    for name in ["A", "B", "C"] {
                        ids[name] = try await manager.download(
                            DownloadRequest(url: server.url("/\(name)"), destination: .directory(temp.path))
                        ).id
                    }
                    ids["D"] = try await manager.download(
                        DownloadRequest(url: server.url("/D"), destination: .directory(temp.path)),
                        priority: 5
                    ).id
                    server.release()
                    #expect(try await waitUntil { try await manager.tasks().allSatisfy { $0.state == .completed } })
                    // C starts last: once its start is told, every start before it was.
                    let told = try await recorder.waitUntilTold(ids["C"]!)
                    #expect(told)
                    #expect(recorder.ids == ["A", "D", "B", "C"].map { ids[$0]! })
                    recorder.task.cancel()
                }
            }
        }
    }

    @Test(
        "pauseAll pauses running and waiting tasks; resumeAll queues them oldest first; cancelAll cancels what is unfinished only",
        arguments: StoreEngine.allCases
    )
    func operationsOnAll(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "s.sqlite") { location in
            try await TestServer.withServer { server in
                server.set("/done", .init(size: 10_000, seed: 9))
                for index in 0..<4 {
                    // Held part of the way in, never let go: none can finish during the test.
                    server.set("/f\(index)", .init(size: 2 << 20, seed: UInt64(index), holdAt: 256 << 10))
                }
                var configuration = ManagerFixtures.configuration(location, limit: 2)
                configuration.downloader.readTimeout = .seconds(3600)  // Held on purpose.
                try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                    let done = try await manager.download(
                        DownloadRequest(url: server.url("/done"), destination: .directory(temp.path))
                    )
                    #expect(try await waitUntil { try await manager.info(done.id).state == .completed })
                    let tasks = try await manager.download(
                        (0..<4).map { DownloadRequest(url: server.url("/f\($0)"), destination: .directory(temp.path)) }
                    )
                    let ids = tasks.map(\.id)
                    #expect(
                        try await waitUntil { try await manager.tasks().filter { $0.state == .running }.count == 2 }
                    )

                    try await manager.pauseAll()
                    let paused = try await manager.tasks().filter { $0.id != done.id }
                    #expect(paused.allSatisfy { $0.state == .paused }, "\(paused.map(\.state))")
                    #expect(try await manager.info(done.id).state == .completed)

                    try await manager.resumeAll()
                    // Queued again oldest first: the first two run, the others wait.
                    #expect(
                        try await waitUntil {
                            let now = try await manager.tasks()
                            return Set(now.filter { $0.state == .running }.map(\.id)) == Set(ids[0..<2])
                        }
                    )
                    let waiting = try await manager.tasks().filter { $0.state == .queued }.map(\.id)
                    #expect(Set(waiting) == Set(ids[2...]))

                    try await manager.cancelAll()
                    let states = try await manager.tasks().filter { $0.id != done.id }.map(\.state)
                    #expect(states == [.cancelled, .cancelled, .cancelled, .cancelled])
                    #expect(try await manager.info(done.id).state == .completed)
                    #expect(sha256(file: temp.file("done")) == server.sha256("/done"))
                    let left = try FileManager.default.contentsOfDirectory(atPath: temp.path).filter {
                        $0.hasSuffix(".part")
                    }
                    if !left.isEmpty {
                        // What each task's record says of its part file, to tell which step kept it.
                        var records: [String] = []
                        for id in ids {
                            let record = try await manager.store.task(id: id)
                            records.append(
                                "\(record?.state.rawValue ?? "gone") part \(record?.partPath.map { ($0 as NSString).lastPathComponent } ?? "none")"
                            )
                        }
                        Issue.record("part files left after cancelAll: \(left); records: \(records)")
                    }
                }
            }
        }
    }

    @Test(
        "pause returns resume data; resume continues from it; cancel removes the part file",
        arguments: StoreEngine.allCases
    )
    func operations(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "s.sqlite") { location in
            try await TestServer.withServer { server in
                // Held part of the way in: p until it is resumed, c for good; both are still
                // running when the test pauses or cancels them, however slow the machine.
                server.set("/p", .init(size: 4 << 20, holdAt: 1 << 20))
                server.set("/c", .init(size: 4 << 20, seed: 2, holdAt: 256 << 10))
                var configuration = ManagerFixtures.configuration(location, limit: 2)
                configuration.downloader.readTimeout = .seconds(3600)  // Held on purpose.
                try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                    let p = try await manager.download(
                        DownloadRequest(url: server.url("/p"), destination: .directory(temp.path))
                    )
                    let c = try await manager.download(
                        DownloadRequest(url: server.url("/c"), destination: .directory(temp.path))
                    )
                    #expect(try await waitUntil { await (manager.progress(of: p.id)?.bytesReceived ?? 0) > 500_000 })
                    let resumeData = try await manager.pause(p.id)
                    #expect(resumeData.bytesCommitted > 0)
                    #expect(try await manager.info(p.id).state == .paused)
                    await expectHaulError(.invalidArgument) { try await manager.pause(p.id) }

                    try await manager.cancel(c.id)
                    let cancelled = try await manager.info(c.id)
                    #expect(cancelled.state == .cancelled, "\(cancelled.errorMessage ?? "no error")")
                    #expect(!FileManager.default.fileExists(atPath: temp.file("c.part")))

                    server.release("/p")
                    _ = try await manager.resume(p.id)
                    #expect(try await waitUntil { try await manager.info(p.id).state == .completed })
                    #expect(sha256(file: temp.file("p")) == server.sha256("/p"))
                    // This once failed in a fresh-clone CI run: restart recovery in run() raced with the
                    // first download() (fixed: withDownloadManager recovers before the body runs).
                    #expect(
                        server.requests(for: "/p").last?.header("Range")
                            == resumeRange(from: resumeData.bytesCommitted),
                        "\(server.requests(for: "/p").map { [$0.header("Range"), $0.header("If-Range")] })"
                    )
                    await expectHaulError(.invalidArgument) { try await manager.resume(p.id) }

                    // Re-adding the same URL and destination finds the finished task, no duplicate.
                    let again = try await manager.download(
                        DownloadRequest(url: server.url("/p"), destination: .directory(temp.path))
                    )
                    #expect(again.id == p.id)
                    #expect(try await manager.tasks().count == 2)
                    let requestsBefore = server.requests(for: "/p").count
                    #expect(try await waitUntil { await manager.runningTaskIDs.isEmpty })
                    #expect(try await manager.info(p.id).state == .completed)
                    #expect(server.requests(for: "/p").count == requestsBefore)

                    try await manager.remove(c.id)
                    #expect(try await manager.tasks().map(\.id) == [p.id])
                }
            }
        }
    }

    @Test(
        "added paused: recorded paused, never started until resumed; a re-add that is paused pauses the running task",
        arguments: StoreEngine.allCases
    )
    func addedPaused(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "s.sqlite") { location in
            try await TestServer.withServer { server in
                server.set("/held", .init(size: 1 << 20, seed: 3))
                server.set("/after", .init(size: 1 << 20, seed: 4))
                // Held part of the way in, never let go: still running when it is added again.
                server.set("/slow", .init(size: 4 << 20, seed: 5, holdAt: 256 << 10))
                var configuration = ManagerFixtures.configuration(location, limit: 4)
                configuration.downloader.readTimeout = .seconds(3600)  // Held on purpose.
                try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                    let events = await manager.events()
                    let held = try await manager.download(
                        [DownloadRequest(url: server.url("/held"), destination: .directory(temp.path))],
                        paused: true
                    )[0]
                    #expect(held.state == .paused)
                    // One added after it runs to the end: the manager has admitted what it could.
                    let after = try await manager.download(
                        DownloadRequest(url: server.url("/after"), destination: .directory(temp.path))
                    )
                    #expect(try await waitUntil { try await manager.info(after.id).state == .completed })
                    #expect(server.requests(for: "/held").isEmpty, "a task added paused was started")
                    #expect(try await manager.info(held.id).state == .paused)

                    _ = try await manager.resume(held.id)
                    #expect(try await waitUntil { try await manager.info(held.id).state == .completed })
                    #expect(sha256(file: temp.file("held")) == server.sha256("/held"))

                    // A task already going on, added again paused, is paused.
                    let slow = try await manager.download(
                        DownloadRequest(url: server.url("/slow"), destination: .directory(temp.path))
                    )
                    #expect(try await waitUntil { try await manager.info(slow.id).state == .running })
                    let again = try await manager.download(
                        [DownloadRequest(url: server.url("/slow"), destination: .directory(temp.path))],
                        paused: true
                    )[0]
                    #expect(again.id == slow.id)
                    #expect(again.state == .paused)

                    // What was told of the first: added (paused), then resumed and on to completed.
                    var states: [TaskState] = []
                    reading: for await event in events {
                        switch event {
                        case .added(let info) where info.id == held.id: states.append(info.state)
                        case .stateChanged(let id, _, let to, _) where id == held.id: states.append(to)
                        case .completed(let id, _) where id == held.id: break reading
                        default: continue
                        }
                    }
                    #expect(Array(states.prefix(2)) == [.paused, .queued], "\(states)")
                }
            }
        }
    }

    @Test("limits below 1 or above 1,000 are refused", arguments: StoreEngine.allCases)
    func badLimits(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "s.sqlite") { location in
            await expectHaulError(.invalidArgument) {
                _ = try DownloadManager(configuration: ManagerFixtures.configuration(location, limit: 0))
            }
            try await DownloadManager.withDownloadManager(
                configuration: ManagerFixtures.configuration(location, limit: 2)
            ) {
                manager in
                await expectHaulError(.invalidArgument) { try await manager.setMaxConcurrentDownloads(0) }
                await expectHaulError(.invalidArgument) { try await manager.setMaxDownloadsPerHost(-1) }
                await expectHaulError(.invalidArgument) { try await manager.setMaxConcurrentDownloads(1_001) }
                await expectHaulError(.invalidArgument) { try await manager.setMaxDownloadsPerHost(Int.max) }
                await expectHaulError(.invalidArgument) { try await manager.setMaxConnectionsPerHost(0) }
                await expectHaulError(.invalidArgument) { try await manager.setMaxConnectionsPerHost(1_001) }
                #expect(await manager.limits == (2, 100, 16))
            }
        }
    }

    @Test(
        "a manager opened on a store left by a crash queues running and queued tasks again, in order",
        arguments: StoreEngine.allCases
    )
    func restartRecovery(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withStore(temp) { store in
            let location = Downloader.StoreLocation.engine(store)
            try await TestServer.withServer { server in
                let names = ["A", "B", "C", "D", "E"]
                // Held a quarter of the way in until the second manager's order is seen: none
                // can end first, however slow the machine.
                for (index, name) in names.enumerated() {
                    server.set("/\(name)", .init(size: 1 << 20, seed: UInt64(index), holdAt: 256 << 10))
                }
                var ids: [String: UUID] = [:]
                var first = ManagerFixtures.configuration(location, limit: 2)
                first.downloader.readTimeout = .seconds(3600)  // Held on purpose.
                try await DownloadManager.withDownloadManager(configuration: first) { manager in
                    for name in names {
                        ids[name] = try await manager.download(
                            DownloadRequest(url: server.url("/\(name)"), destination: .directory(temp.path))
                        ).id
                    }
                    _ = try await manager.pause(ids["E"]!)
                    #expect(try await waitUntil { try await manager.tasks().contains { $0.bytesCommitted > 0 } })
                }
                // As a kill -9 would leave it: the two that were running still say so.
                try await store.setState(ids["A"]!, .running)
                try await store.setState(ids["B"]!, .running)

                var second = ManagerFixtures.configuration(location, limit: 1)
                second.downloader.readTimeout = .seconds(3600)  // Held on purpose.
                try await DownloadManager.withDownloadManager(configuration: second) { manager in
                    let name = { (id: UUID) in ids.first { $0.value == id }!.key }
                    let recorder = ManagerFixtures.Recorder(manager.events(), state: .running)
                    #expect(try await waitUntil { await !manager.runningTaskIDs.isEmpty })
                    #expect(await manager.runningTaskIDs.map(name) == ["A"])
                    #expect(await manager.waitingTaskIDs.map(name) == ["B", "C", "D"])
                    server.release()
                    #expect(
                        try await waitUntil { try await manager.tasks().filter { $0.state == .completed }.count == 4 }
                    )
                    #expect(try await manager.info(ids["E"]!).state == .paused)
                    // D starts last: once its start is told, every start before it was.
                    let told = try await recorder.waitUntilTold(ids["D"]!)
                    #expect(told)
                    // A may have started before the recorder subscribed; the rest start in order.
                    #expect(recorder.ids.map(name).filter { $0 != "A" } == ["B", "C", "D"])
                    recorder.task.cancel()
                }
                for name in ["A", "B", "C", "D"] { #expect(sha256(file: temp.file(name)) == server.sha256("/\(name)")) }
            }
        }
    }

    @Test(
        "a subscriber that never reads neither stalls downloads nor keeps more than one progress per task",
        arguments: StoreEngine.allCases
    )
    func slowSubscriber(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "s.sqlite") { location in
            try await TestServer.withServer { server in
                for index in 0..<40 { server.set("/t\(index)", .init(size: 20_000, seed: UInt64(index))) }
                try await DownloadManager.withDownloadManager(
                    configuration: ManagerFixtures.configuration(location, limit: 8)
                ) {
                    manager in
                    let ignored = manager.events()
                    for index in 0..<40 {
                        _ = try await manager.download(
                            DownloadRequest(url: server.url("/t\(index)"), destination: .directory(temp.path))
                        )
                    }
                    #expect(try await waitUntil { try await manager.tasks().allSatisfy { $0.state == .completed } })
                    // The store says completed a moment before the manager has published it.
                    #expect(try await waitUntil { await manager.runningTaskIDs.isEmpty })
                    let pending = ignored.subscription.pendingCount
                    #expect(pending.progress <= 40)
                    #expect(pending.events <= 40 * 6)
                    #expect(ignored.droppedEvents == 0)
                    // The events are all there, in order per task: added, then running, then completed.
                    var seen: [UUID: [String]] = [:]
                    var iterator = ignored.makeAsyncIterator()
                    for _ in 0..<(pending.events + pending.progress) {
                        guard let event = await iterator.next() else { break }
                        switch event {
                        case .added(let info): seen[info.id, default: []].append("added")
                        case .stateChanged(let id, _, let to, _): seen[id, default: []].append(to.rawValue)
                        case .completed(let id, _): seen[id, default: []].append("completed!")
                        default: break
                        }
                    }
                    #expect(seen.count == 40)
                    #expect(
                        seen.values.allSatisfy { $0 == ["added", "running", "completed", "completed!"] },
                        "\(seen.values.filter { $0 != ["added", "running", "completed", "completed!"] })"
                    )
                }
            }
        }
    }

    @Test("resume data from one manager continues in another manager on another store", arguments: StoreEngine.allCases)
    func resumeDataAcrossManagers(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "one.sqlite") { one in
            try await engine.withLocation(temp, "two.sqlite") { two in
                try await TestServer.withServer { server in
                    // Held a third of the way in until the second manager resumes it: still
                    // running when it is paused, however slow the machine.
                    server.set("/r", .init(size: 3 << 20, holdAt: 1 << 20))
                    var first = ManagerFixtures.configuration(one, limit: 2)
                    first.downloader.readTimeout = .seconds(3600)  // Held on purpose.
                    let blob = try await DownloadManager.withDownloadManager(configuration: first) { manager in
                        let task = try await manager.download(
                            DownloadRequest(url: server.url("/r"), destination: .directory(temp.path))
                        )
                        #expect(
                            try await waitUntil { await (manager.progress(of: task.id)?.bytesReceived ?? 0) > 600_000 }
                        )
                        let overall = await manager.overallProgress()
                        #expect(overall.running == 1 && overall.waiting == 0)
                        return try await manager.pause(task.id).encoded()
                    }
                    let resumeData = try ResumeData(decoding: blob)
                    server.release("/r")
                    try await DownloadManager.withDownloadManager(
                        configuration: ManagerFixtures.configuration(two, limit: 2)
                    ) { manager in
                        let events = manager.events()
                        let info = try await manager.download(resumingFrom: resumeData)
                        #expect(info.id == resumeData.taskID)
                        var resumedAt: Int64?
                        for await event in events {
                            if case .resumed(_, let offset, let total) = event {
                                resumedAt = offset
                                #expect(total == 3 << 20)
                            }
                            if case .completed = event { break }
                        }
                        #expect(resumedAt == resumeData.bytesCommitted)
                        await expectHaulError(.invalidArgument) { _ = try await manager.pause(info.id) }
                    }
                    #expect(sha256(file: temp.file("r")) == server.sha256("/r"))
                    #expect(
                        server.requests(for: "/r").last?.header("Range") == resumeRange(from: resumeData.bytesCommitted)
                    )
                }
            }
        }
    }

    @Test(
        "restart recovery never takes over a task added before run(): a pause really stops it",
        arguments: StoreEngine.allCases
    )
    func recoveryRespectsTasksAddedBeforeRun(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withLocation(temp, "s.sqlite") { location in
            try await TestServer.withServer { server in
                // Held a quarter of the way in: still running when it is paused.
                server.set("/early", .init(size: 4 << 20, holdAt: 1 << 20))
                var configuration = ManagerFixtures.configuration(location, limit: 2)
                configuration.downloader.readTimeout = .seconds(3600)  // Held on purpose.
                let manager = try DownloadManager(configuration: configuration)
                let info = try await manager.download(
                    DownloadRequest(url: server.url("/early"), destination: .directory(temp.path))
                )
                #expect(await manager.runningTaskIDs == [info.id])
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await manager.run() }
                    #expect(try await waitUntil { await (manager.progress(of: info.id)?.bytesReceived ?? 0) > 300_000 })
                    let resumeData = try await manager.pause(info.id)
                    #expect(resumeData.bytesCommitted > 0)
                    #expect(try await waitUntil { server.activeResponses == 0 }, "the transfer must really stop")
                    #expect(try await manager.info(info.id).state == .paused)
                    await manager.shutdown()
                    try await group.waitForAll()
                }
            }
        }
    }
}
