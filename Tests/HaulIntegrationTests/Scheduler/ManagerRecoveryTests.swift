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

extension DownloadManagerTests {
    /// A restart's recovery, a slow subscriber, and resume data carried to another manager.
    @Suite("DownloadManager: recovery and hand-over")
    struct Recovery {
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
                            try await waitUntil {
                                try await manager.tasks().filter { $0.state == .completed }.count == 4
                            }
                        )
                        #expect(try await manager.info(ids["E"]!).state == .paused)
                        // D starts last: once its start is told, every start before it was.
                        let told = try await recorder.waitUntilTold(ids["D"]!)
                        #expect(told)
                        // A may have started before the recorder subscribed; the rest start in order.
                        #expect(recorder.ids.map(name).filter { $0 != "A" } == ["B", "C", "D"])
                        recorder.task.cancel()
                    }
                    for name in ["A", "B", "C", "D"] {
                        #expect(sha256(file: temp.file(name)) == server.sha256("/\(name)"))
                    }
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

        @Test(
            "resume data from one manager continues in another manager on another store",
            arguments: StoreEngine.allCases
        )
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
                                try await waitUntil {
                                    await (manager.progress(of: task.id)?.bytesReceived ?? 0) > 600_000
                                }
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
                            server.requests(for: "/r").last?.header("Range")
                                == resumeRange(from: resumeData.bytesCommitted)
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
                        #expect(
                            try await waitUntil { await (manager.progress(of: info.id)?.bytesReceived ?? 0) > 300_000 }
                        )
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
}
