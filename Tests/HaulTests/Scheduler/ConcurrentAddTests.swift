import Foundation
import GRDB
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Synchronization
import Testing

@testable import Haul

/// Adds that race each other and the transfer they name (issue 11 items 14–16).
@Suite("Concurrent adds and event consumers", .timeLimit(.minutes(10)))
struct ConcurrentAddTests {
    @Test("adds of one new URL racing from four stores (as four processes would) record one task")
    func racingAddsRecordOne() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        let out = try temp.directory("out")
        let downloaders = try (0..<4).map { _ in try Downloader(configuration: testConfiguration(store: path)) }
        for round in 0..<5 {
            let request = DownloadRequest(
                url: URL(string: "http://127.0.0.1:9/f\(round)")!,
                destination: .directory(out)
            )
            let ids = try await withThrowingTaskGroup(of: UUID.self) { group in
                for index in 0..<16 {
                    let downloader = downloaders[index % 4]
                    group.addTask { try await downloader.prepare(request).record.id }
                }
                return try await group.reduce(into: Set<UUID>()) { $0.insert($1) }
            }
            #expect(ids.count == 1, "round \(round): \(ids.count) tasks for one URL")
        }
        #expect(try await Store(path: path).allTasks().count == 5)
        for downloader in downloaders { try await downloader.shutdown() }
    }

    @Test("re-adding a running download never moves its state or offsets back; a completed one stays completed")
    func reAddNeverRewritesProgress() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 3_000_000, seed: 8, bytesPerSecond: 1_500_000))
            let request = DownloadRequest(url: server.url("/f.bin"), destination: .directory(temp.path))
            try await Downloader.withDownloader(configuration: testConfiguration(store: path)) { downloader in
                let task = try await downloader.download(request)
                // Another process adds the same download again and again while it runs.
                let store = try Store(path: path)
                let other = try Downloader(configuration: testConfiguration(store: path))
                var committed: Int64 = 0
                var states: [TaskState] = []
                let result = Task { try await task.result() }
                while true {
                    let prepared = try await other.prepare(request)
                    states.append(prepared.record.state)
                    let now = try await store.segments(of: task.id).reduce(0) {
                        $0 + $1.committed - $1.start
                    }
                    #expect(now >= committed, "offsets went back from \(committed) to \(now)")
                    committed = now
                    if let finished = try await store.task(id: task.id), finished.state == .completed { break }
                }
                let path = try await result.value.path
                #expect(sha256(file: path) == server.sha256("/f.bin"))
                // Re-adds after the end leave it completed.
                for _ in 0..<5 { _ = try await other.prepare(request) }
                #expect(try await store.task(id: task.id)?.state == .completed)
                #expect(try await store.allTasks().count == 1)
                try await other.shutdown()
            }
        }
    }

    @Test("the upgrade to one task per URL and file keeps the newest of earlier duplicates")
    func upgradeDeduplicates() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        let out = try temp.directory("out")
        // A store as the version before left it, with a duplicate an add race created.
        let database = try DatabaseQueue(path: path)
        try Store.migrator.migrate(database, upTo: "v7: the file says it is a Haul store")
        let url = "http://127.0.0.1:9/dup"
        let older = UUID()
        let newer = UUID()
        try await database.write { db in
            for (index, id) in [older, newer].enumerated() {
                var record = TaskRecord(
                    id: id,
                    url: URL(string: url)!,
                    destination: .directory(out),
                    explicitName: false,
                    requestHeaders: [],
                    checksum: nil,
                    overwrite: false,
                    now: Date(timeIntervalSince1970: 1_000 + Double(index))
                )
                record.queueOrder = Int64(index + 1)
                // The columns of that version only: later ones (tls, proxy) did not exist yet.
                let values = try record.databaseDictionary.filter {
                    ![
                        "tls", "proxy", "credentials", "cookies", "nextTryAt", "retryingSince", "allowsMetered",
                        "checkNewer", "continuesExisting", "hooks", "sources", "maxConnectionsPerServer",
                        "followsMetalink",
                    ].contains($0.key)
                }
                let columns = values.keys.sorted()
                try db.execute(
                    sql:
                        "INSERT INTO task (\(columns.joined(separator: ", "))) VALUES (\(columns.map { _ in "?" }.joined(separator: ", ")))",
                    arguments: StatementArguments(columns.map { values[$0]! })
                )
            }
        }
        try database.close()
        let store = try Store(path: path)
        // Read through the pool after the migration: every column it added is found (a reader
        // opened before it once kept the old columns, and allowsMetered was "not found").
        let tasks = try await store.allTasks()
        #expect(
            tasks.allSatisfy {
                $0.allowsMetered && !$0.checkNewer && $0.tls.isDefault && $0.nextTryAt == nil && $0.followsMetalink
            }
        )
        #expect(tasks.first { $0.id == older }?.state == .cancelled)
        #expect(tasks.first { $0.id == newer }?.state == .queued)
        // And the index now refuses a second live task for it.
        let found = try Downloader(configuration: testConfiguration(store: path))
        let prepared = try await found.prepare(DownloadRequest(url: URL(string: url)!, destination: .directory(out)))
        #expect(prepared.record.id == newer)
        try await found.shutdown()
    }

    @Test("two iterators of one event sequence each get events, and none hangs or leaks")
    func twoIteratorsShareEvents() async throws {
        let hub = EventHub()
        let events = hub.subscribe()
        final class Received: Sendable {
            let byConsumer = Mutex<[Int: [UUID]]>([:])
        }
        let received = Received()
        let ids = (0..<200).map { _ in UUID() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for consumer in 0..<2 {
                group.addTask {
                    for await event in events {
                        guard let id = event.taskID else { continue }
                        received.byConsumer.withLock { $0[consumer, default: []].append(id) }
                    }
                }
            }
            // Both wait before the first event.
            #expect(try await waitUntil { events.subscription.waitingCount == 2 })
            for id in ids {
                hub.publish(.stateChanged(id: id, from: .queued, to: .running, reason: .started))
                await Task.yield()
            }
            hub.finish()
            try await group.waitForAll()
        }
        let all = received.byConsumer.withLock { $0 }
        #expect(Set(all.values.joined()) == Set(ids), "every event went to one consumer")
        #expect(all.values.joined().count == ids.count, "none twice")
        #expect(all.count == 2, "both consumers got events")
    }
}
