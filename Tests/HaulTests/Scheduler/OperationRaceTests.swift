import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// Two operations on one task at once (two clients, say): each takes its turn, so the task
/// ends in one state, the same in the manager and in the store, and a cancelled task has no
/// transfer left running. Before the turn, a resume's store write and a cancel's could
/// interleave across their awaits: the cancel won in the manager while the resumed transfer
/// ran on and recorded itself running.
@Suite("Operations racing on one task", .timeLimit(.minutes(3)))
struct OperationRaceTests {
    /// A paused download of a file whose bytes the server holds, so a run started stays running.
    static func withPausedTasks(
        _ count: Int,
        _ body: (DownloadManager, [UUID], TestServer) async throws -> Void
    ) async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            var configuration = ManagerFixtures.configuration(.sqlite(at: temp.file("s.sqlite")), limit: count)
            configuration.downloader.readTimeout = .seconds(3600)  // Held on purpose.
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                var requests: [DownloadRequest] = []
                for index in 0..<count {
                    server.set("/f\(index)", .init(size: 256 << 10, seed: UInt64(index), holdAt: 64 << 10))
                    requests.append(DownloadRequest(url: server.url("/f\(index)"), destination: .directory(temp.path)))
                }
                let ids = try await manager.download(requests, paused: true).map(\.id)
                try await body(manager, ids, server)
                server.release()
            }
        }
    }

    /// The manager's state of `id` and the store's, once no write about it is under way.
    static func states(_ manager: DownloadManager, _ id: UUID) async throws -> (TaskState?, TaskState?) {
        (await manager.machine.state(of: id), try await manager.store.task(id: id)?.state)
    }

    @Test("resume and cancel of one paused task at once: it ends cancelled with no transfer, or runs, in both places")
    func resumeAgainstCancel() async throws {
        try await Self.withPausedTasks(8) { manager, ids, server in
            for id in ids {
                async let resumed: Void = { _ = try? await manager.resume(id) }()
                async let cancelled: Void = { try? await manager.cancel(id) }()
                _ = await (resumed, cancelled)
                let (shown, stored) = try await Self.states(manager, id)
                switch shown {
                case .cancelled:
                    #expect(stored == .cancelled)
                    #expect(await !manager.runningTaskIDs.contains(id), "a cancelled task's transfer runs")
                    #expect(await !manager.machine.isRunning(id))
                case .queued, .running:
                    #expect(
                        stored == .queued || stored == .running,
                        "the manager runs it, the store says \(String(describing: stored))"
                    )
                default:
                    Issue.record(
                        "resume and cancel left \(String(describing: shown)) (store: \(String(describing: stored)))"
                    )
                }
            }
        }
    }
}
