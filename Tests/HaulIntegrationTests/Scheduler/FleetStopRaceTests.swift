import Foundation
import HaulPostgres
import HaulTestSupport
import HaulTesting
import Synchronization
import Testing

@testable import Haul

/// A pause or cancel given while the node is taking the task's lease: the stop holds. The
/// lease taken meanwhile is not used to start the task, and no run of it writes "running"
/// over the stop afterwards (a CI run saw a paused task come back as running).
@Suite("Fleet: a stop while the lease is being taken", .postgresServer, .timeLimit(.minutes(10)))
struct FleetStopRaceTests {
    @Test(
        "add then pause or cancel at once, many times: every task stays as stopped, in the store and in the manager, and none is fetched after its stop returned",
        arguments: [TaskOperation.pause, .cancel]
    )
    func stopWhileLeasing(_ stop: TaskOperation) async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            let rounds = 40
            // Each stalls after its first bytes: a run started by mistake stays running.
            for index in 0..<rounds {
                server.set("/s\(index)", .init(size: 1 << 20, seed: UInt64(index), stallAt: 1_000))
            }
            server.set("/done", .init(size: 4_096, seed: 99))
            try await FleetManagerTests.withNodes(["a"]) { nodes in
                let configuration = FleetManagerTests.configuration(nodes[0], limit: 8)
                try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                    // Every state each task is told to move to, in the order told: a run started
                    // after a stop returned is told "running" after the stop's state. (The server's
                    // count of requests cannot say it: a request a run sent just before the stop
                    // returned may reach the server just after.)
                    let told = Mutex<[(id: UUID, to: TaskState)]>([])
                    let events = manager.events()
                    let recorder = Task {
                        for await event in events {
                            if case .stateChanged(let id, _, let to, _) = event {
                                told.withLock { $0.append((id, to)) }
                            }
                        }
                    }
                    defer { recorder.cancel() }
                    var ids: [UUID] = []
                    for index in 0..<rounds {
                        let added = try await manager.download(
                            DownloadRequest(url: server.url("/s\(index)"), destination: .directory(temp.path))
                        )
                        switch stop {
                        case .pause: _ = try await manager.pause(added.id)
                        default: try await manager.cancel(added.id)
                        }
                        ids.append(added.id)
                    }
                    let stopped: TaskState = stop == .pause ? .paused : .cancelled
                    // A later download goes through the same line and completes: any lease
                    // taken on a stopped task has been acted on by then.
                    let sentinel = try await manager.download(
                        DownloadRequest(url: server.url("/done"), destination: .directory(temp.path))
                    )
                    #expect(
                        try await waitUntil(timeout: .seconds(60)) {
                            try await manager.info(sentinel.id).state == .completed
                        }
                    )
                    // (The sentinel's end is handled just after its completion is recorded.)
                    #expect(try await waitUntil { await manager.runningTaskIDs.isEmpty })
                    let stored = try await nodes[0].infos(ids: ids, background: true, session: nil)
                    let wrong = stored.filter { $0.state != stopped || $0.node != nil }
                    #expect(wrong.isEmpty, "\(wrong.map { "\($0.id.uuidString.prefix(8)) \($0.state)" })")
                    #expect(
                        try await waitUntil {
                            let stops = told.withLock { $0.filter { $0.to == stopped }.map(\.id) }
                            return Set(stops).isSuperset(of: ids)
                        }
                    )
                    let moves = told.withLock { $0 }
                    for (index, id) in ids.enumerated() {
                        #expect(try await manager.info(id).state == stopped)
                        let after = moves.filter { $0.id == id }.map(\.to).drop { $0 != stopped }
                        #expect(!after.contains(.running), "s\(index) ran after its \(stop.rawValue) returned")
                        #expect(server.requests(for: "/s\(index)").count <= 1, "s\(index) was fetched twice")
                    }
                    #expect(try await nodes[0].fleet.report.entries().allSatisfy { $0.owner == nil })
                }
            }
        }
    }
}
