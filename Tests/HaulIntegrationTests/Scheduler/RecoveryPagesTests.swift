import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// A manager opened on a store of more tasks than it reads at once.
@Suite("DownloadManager: recovery in pages", .timeLimit(.minutes(5)))
struct RecoveryPagesTests {
    @Test(
        "more tasks than two pages, thousands at one place in the queue across a page's end: each known once, in the store's order"
    )
    func pages() async throws {
        let temp = try TemporaryDirectory()
        let store = try Store(path: temp.file("haul.sqlite"))
        try await TestServer.withServer { server in
            // The first to start is held: every other task waits in line.
            server.set("/held", .init(size: 1 << 20, seed: 1, holdAt: 1_024))
            let url = server.url("/held").absoluteString
            let count = DownloadManager.recoveryPage * 2 + 500
            // (A library's manager, as in ManagerFixtures: its tasks are not the daemon's.)
            let records = (0..<count).map { index in
                var record = StoreRecords.record(url, into: temp.path, name: "f\(index)")
                record.background = false
                return record
            }
            try await store.insertMany(records)
            // 12,001 tasks at one place, across the first page's end (a store edited by hand).
            let shared = Int64(DownloadManager.recoveryPage - 1_000)
            try await store.write { db in
                try db.execute(
                    sql: "UPDATE task SET queueOrder = ? WHERE queueOrder BETWEEN ? AND ?",
                    arguments: [shared, shared, shared + 12_000]
                )
            }
            let stored = try await store.tasks(inStates: TaskState.allCases)
            let order = Dictionary(uniqueKeysWithValues: stored.map { ($0.id, $0.queueOrder) })
            let configuration = ManagerFixtures.configuration(.store(store), limit: 1)
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                let started = try await waitUntil { await !manager.runningTaskIDs.isEmpty }
                #expect(started)
                let known = await manager.runningTaskIDs + manager.waitingTaskIDs
                #expect(known.count == count)
                #expect(Set(known).count == count && Set(known).isSubset(of: order.keys))
                let places = known.compactMap { order[$0] }
                #expect(places == places.sorted())
                server.release()
            }
        }
    }
}
