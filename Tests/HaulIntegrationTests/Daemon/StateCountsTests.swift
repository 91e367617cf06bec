import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// Every count the daemon shows comes from one reading: `haul status`'s per-state counts,
/// its running and waiting, and the list agree — also while a started download has no
/// answer yet (it records "running" with its first response). Before, `haul status` printed
/// `tasks: 3 queued, 3 running` above `running: 5 of at most 5, 1 waiting`.
@Suite("Daemon: counts that agree", .postgresServer, .timeLimit(.minutes(10)))
struct StateCountsTests {
    @Test(
        "two downloads started against a server that never answers, one waiting: status, its counts and the list all say 2 running, 1 queued",
        arguments: StoreEngine.allCases
    )
    func countsAgree(engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let silent = try FaultyListener(.silent)
        defer { silent.stop() }
        try await withDaemon(on: engine, home: temp.file("home"), maxConcurrent: 2) { client, _ in
            let added = try await client.add(
                ["a", "b", "c"].map {
                    DownloadRequest(
                        url: URL(string: "http://127.0.0.1:\(silent.port)/\($0)")!,
                        destination: .directory(out)
                    )
                }
            )
            var status = try await client.status()
            #expect(
                try await waitUntil {
                    status = try await client.status()
                    return status.running == 2
                }
            )
            #expect(status.tasks == ["running": 2, "queued": 1], "\(status.tasks)")
            #expect(status.waiting == 1)
            let listed = try await client.tasks()
            #expect(listed.filter { $0.state == .running }.count == 2)
            #expect(listed.filter { $0.state == .queued }.count == 1)
            // The first two in queue order run; the third waits.
            #expect(listed.map(\.state) == [.running, .running, .queued])
            #expect(try await client.info(added[0].id).state == .running)
            _ = try await client.cancel(.everything)
            #expect(try await client.status().tasks == ["cancelled": 3])
        }
    }
}
