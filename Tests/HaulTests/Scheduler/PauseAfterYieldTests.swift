import Foundation
import HaulTesting
import Testing

@testable import Haul

/// A pause or cancel that comes while a run is already stopping to make room (a limit just
/// lowered) is what the task ends by: it is paused (or cancelled) in the manager and in the
/// store, and does not start again when there is room.
@Suite("A stop after a yield", .timeLimit(.minutes(3)))
struct PauseAfterYieldTests {
    @Test("limit lowered, then the yielded task paused at once: paused, recorded, not started when the limit goes up")
    func pauseAfterYield() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            for (index, name) in ["A", "B"].enumerated() {
                server.set("/\(name)", .init(size: 1 << 20, seed: UInt64(40 + index), holdAt: 256 << 10))
            }
            var configuration = DownloadManagerTests.configuration(.sqlite(at: temp.file("s.sqlite")), limit: 2)
            configuration.downloader.readTimeout = .seconds(3600)  // Held on purpose.
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                let a = try await manager.download(
                    DownloadRequest(url: server.url("/A"), destination: .directory(temp.path))
                )
                let b = try await manager.download(
                    DownloadRequest(url: server.url("/B"), destination: .directory(temp.path))
                )
                #expect(try await waitUntil { server.activeResponses == 2 })
                // B, the newest, is asked to make room; the pause follows before it has stopped.
                try await manager.setMaxConcurrentDownloads(1)
                try await manager.pause(b.id)
                #expect(try await manager.info(b.id).state == .paused)
                #expect(try await Store(path: temp.file("s.sqlite")).infos().first { $0.id == b.id }?.state == .paused)
                try await manager.setMaxConcurrentDownloads(2)
                #expect(await manager.runningTaskIDs == [a.id])
                server.release()
                #expect(try await waitUntil { try await manager.info(a.id).state == .completed })
                #expect(try await manager.info(b.id).state == .paused)
            }
            #expect(server.requests(for: "/B").count == 1)
        }
    }

    @Test("limit lowered, then the yielded task cancelled at once: cancelled, its part file gone")
    func cancelAfterYield() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            for (index, name) in ["A", "B"].enumerated() {
                server.set("/\(name)", .init(size: 1 << 20, seed: UInt64(42 + index), holdAt: 256 << 10))
            }
            var configuration = DownloadManagerTests.configuration(.sqlite(at: temp.file("s.sqlite")), limit: 2)
            configuration.downloader.readTimeout = .seconds(3600)  // Held on purpose.
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                _ = try await manager.download(
                    DownloadRequest(url: server.url("/A"), destination: .directory(temp.path))
                )
                let b = try await manager.download(
                    DownloadRequest(url: server.url("/B"), destination: .directory(temp.path))
                )
                #expect(try await waitUntil { server.activeResponses == 2 })
                try await manager.setMaxConcurrentDownloads(1)
                try await manager.cancel(b.id)
                #expect(try await manager.info(b.id).state == .cancelled)
                try await manager.setMaxConcurrentDownloads(2)
                server.release()
                #expect(try await waitUntil { try await manager.tasks().allSatisfy { $0.state != .running } })
                #expect(try await manager.info(b.id).state == .cancelled)
            }
            #expect(!FileManager.default.fileExists(atPath: temp.file("B.part")))
            #expect(!FileManager.default.fileExists(atPath: temp.file("B")))
        }
    }
}
