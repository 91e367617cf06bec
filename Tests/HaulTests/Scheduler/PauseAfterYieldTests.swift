import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// A pause or cancel that comes while a run is already stopping to make room (a limit just
/// lowered) is what the task ends by: it is paused (or cancelled) in the manager and in the
/// store, and does not start again when there is room.
@Suite("A stop after a yield", .timeLimit(.minutes(3)))
struct PauseAfterYieldTests {
    /// Two downloads, A and B, both held a quarter of the way in, under a limit of 2; the
    /// limit then lowered to 1, which asks B, the newer, to make room. `body` stops B at once.
    static func withYieldingB(
        seed: UInt64,
        _ body: (DownloadManager, UUID, UUID, TestServer) async throws -> Void
    ) async throws -> TemporaryDirectory {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            for (index, name) in ["A", "B"].enumerated() {
                server.set("/\(name)", .init(size: 1 << 20, seed: seed + UInt64(index), holdAt: 256 << 10))
            }
            var configuration = ManagerFixtures.configuration(.sqlite(at: temp.file("s.sqlite")), limit: 2)
            configuration.downloader.readTimeout = .seconds(3600)  // Held on purpose.
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                var ids: [UUID] = []
                for name in ["A", "B"] {
                    let request = DownloadRequest(url: server.url("/\(name)"), destination: .directory(temp.path))
                    ids.append(try await manager.download(request).id)
                }
                #expect(try await waitUntil { server.activeResponses == 2 })
                try await manager.setMaxConcurrentDownloads(1)
                try await body(manager, ids[0], ids[1], server)
            }
            #expect(server.requests(for: "/B").count == 1, "B was fetched again after its stop")
        }
        return temp
    }

    @Test("limit lowered, then the yielded task paused at once: paused, recorded, not started when the limit goes up")
    func pauseAfterYield() async throws {
        _ = try await Self.withYieldingB(seed: 40) { manager, a, b, server in
            try await manager.pause(b)
            #expect(try await manager.info(b).state == .paused)
            #expect(try await manager.store.infos(ids: [b], background: nil, session: nil).first?.state == .paused)
            try await manager.setMaxConcurrentDownloads(2)
            #expect(await manager.runningTaskIDs == [a])
            server.release()
            #expect(try await waitUntil { try await manager.info(a).state == .completed })
            #expect(try await manager.info(b).state == .paused)
        }
    }

    @Test("limit lowered, then the yielded task cancelled at once: cancelled, its part file gone")
    func cancelAfterYield() async throws {
        let temp = try await Self.withYieldingB(seed: 42) { manager, a, b, server in
            try await manager.cancel(b)
            #expect(try await manager.info(b).state == .cancelled)
            try await manager.setMaxConcurrentDownloads(2)
            server.release()
            #expect(try await waitUntil { try await manager.info(a).state == .completed })
            #expect(try await manager.info(b).state == .cancelled)
        }
        #expect(!FileManager.default.fileExists(atPath: temp.file("B.part")))
        #expect(!FileManager.default.fileExists(atPath: temp.file("B")))
    }
}
