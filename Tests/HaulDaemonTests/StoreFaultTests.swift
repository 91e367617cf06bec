import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

@Suite("The store's disk fills", .tags(.slow), .leftOutOfFastLoop, .timeLimit(.minutes(20))) struct StoreFaultTests {
    @Test("while tasks run: refused changes change nothing, and every task completes once there is space again")
    func storeFullRecovers() async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let home = temp.file("home")
        let storePath = home + "/haul.sqlite"
        defer { StoreFaults.setFull(false, atPath: storePath) }
        try await TestServer.withServer { server in
            // One connection each, 8 s per file: a transfer that went on after its checkpoint
            // was refused would fetch the whole file before stopping.
            let size = 8_000_000
            for index in 0..<4 {
                server.set("/f\(index)", .init(size: size, seed: UInt64(index), bytesPerSecond: 1_000_000))
            }
            server.set("/late", .init(size: 1_000, seed: 9))
            try await withDaemon(home: home, maxConcurrent: 2) { client, _ in
                let added = try await client.add(
                    (0..<4).map {
                        DownloadRequest(
                            url: server.url("/f\($0)"),
                            destination: .directory(out),
                            session: "s",
                            connections: 1
                        )
                    }
                )
                let ids = added.map(\.id)
                #expect(try await waitUntil { try await client.tasks().filter { $0.state == .running }.count == 2 })
                let waiting = try #require(try await client.tasks().first { $0.state == .queued })

                StoreFaults.setFull(true, atPath: storePath)
                // Nothing can be recorded: an add fails with the store's reason and adds nothing.
                let refused = await expectHaulError(.store) {
                    _ = try await client.add([DownloadRequest(url: server.url("/late"), destination: .directory(out))])
                }
                #expect(refused?.message.contains("No space left on device") == true, "\(String(describing: refused))")
                // A pause the store refuses leaves the task as it was.
                await expectHaulError(.store) { _ = try await client.pause(.tasks([waiting.id])) }
                #expect(try await client.info(waiting.id).state == .queued)
                // The running ones cannot checkpoint: they stop and wait, queued, none failed or done.
                // A second or two; the wide bound only turns a hang into a failure on a loaded machine
                // (it took a minute there while refused checkpoints did not stop the connections).
                let held = try await waitUntil(timeout: .seconds(180)) {
                    try await client.tasks().allSatisfy { $0.state == .queued }
                }
                let statesWhileFull = try await client.tasks().map(\.state)
                #expect(held, "\(statesWhileFull)")
                // A refused checkpoint stops the connections at once, not after the rest of the file.
                for index in 0..<4 {
                    #expect(
                        server.bodyBytesSent("/f\(index)") < size,
                        "f\(index) was fetched on while nothing could be recorded"
                    )
                }

                StoreFaults.setFull(false, atPath: storePath)
                let completed = try await waitUntil(timeout: .seconds(60)) {
                    try await client.tasks().allSatisfy { $0.state == .completed }
                }
                let statesAfter = try await client.tasks().map(\.state)
                #expect(completed, "\(statesAfter)")
                for index in 0..<4 { #expect(sha256(file: out + "/f\(index)") == server.sha256("/f\(index)")) }
                #expect(try await client.tasks().count == 4, "the refused add left nothing")
                #expect(!FileManager.default.fileExists(atPath: out + "/late"))
                // Every completion is told once.
                let completions = try await client.loggedEvents(session: "s").filter { $0.kind == .completed }
                #expect(completions.count == 4)
                #expect(Set(completions.map(\.taskID)) == Set(ids))
            }
            // What the store holds agrees, after the daemon has stopped.
            let stored = try await Store(path: storePath).infos()
            #expect(stored.count == 4)
            #expect(stored.allSatisfy { $0.state == .completed })
        }
    }
}
