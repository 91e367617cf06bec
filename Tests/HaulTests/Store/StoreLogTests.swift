import Foundation
import GRDB
import HaulTestSupport
import Synchronization
import Testing

@testable import Haul

/// The write-ahead log a store keeps between processes, folded in when it has grown
/// (``Store/foldLog(ifLargerThan:)``), never by waiting for another connection.
@Suite("A store's kept log", .timeLimit(.minutes(1)))
struct StoreLogTests {
    /// The store at `path` with `count` more tasks (from `first`), written one transaction each.
    private static func store(
        at path: String,
        tasks count: Int,
        from first: Int = 0,
        in temp: TemporaryDirectory
    ) async throws -> Store {
        let store = try Store(path: path, readers: .serial)
        for index in first..<first + count {
            let task = StoreRecords.record("https://example.test/\(index).bin", into: temp.path, name: "\(index).bin")
            _ = try await store.insert(task, segments: [])
        }
        return store
    }

    /// A serial store in a new directory with `tasks` tasks, and the size of its log then.
    private static func grown(
        tasks: Int
    ) async throws -> (temp: TemporaryDirectory, path: String, store: Store, log: Int64) {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        let store = try await Self.store(at: path, tasks: tasks, in: temp)
        return (temp, path, store, Int64(fileSize(path + "-wal")))
    }

    @Test("a log past the size is folded in and emptied, its tasks kept; one under it is left")
    func foldsPastTheSize() async throws {
        let (temp, path, store, grown) = try await Self.grown(tasks: 20)
        #expect(grown > 40_000)
        #expect(!store.foldLogNow(ifLargerThan: grown))
        #expect(Int64(fileSize(path + "-wal")) == grown)
        #expect(await store.foldLog(ifLargerThan: grown - 1))
        #expect(Int64(fileSize(path + "-wal")) == 0)
        #expect(try await store.allTasks().count == 20)
        // The database file alone holds them.
        let copy = temp.file("copy.sqlite")
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        let count = try await DatabaseQueue(path: copy).read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM task") }
        #expect(count == 20)
        // The store still writes, at its usual busy timeout.
        _ = try await Self.store(at: path, tasks: 1, from: 20, in: temp)
        #expect(try await store.allTasks().count == 21)
        #expect(try await store.writer.read { try Int.fetchOne($0, sql: "PRAGMA busy_timeout") } == 30_000)
    }

    @Test("another connection reading: the fold does not wait for it and leaves the log")
    func readerNotAwaited() async throws {
        let (temp, path, store, grown) = try await Self.grown(tasks: 10)
        defer { withExtendedLifetime(temp) {} }
        // Another process's read, as a daemon's: a transaction open on the store's last snapshot.
        var configuration = Configuration()
        configuration.allowsUnsafeTransactions = true
        let reader = try DatabaseQueue(path: path, configuration: configuration)
        try reader.inDatabase { db in
            try db.beginTransaction(.deferred)
            _ = try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM task")
        }
        // A fold that waited would get its way once the reader ends (after ten seconds at most)
        // and say so.
        let folded = Mutex<Bool?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread.detachNewThread {
            folded.withLock { $0 = store.foldLogNow(ifLargerThan: 0) }
            done.signal()
        }
        let answered = done.wait(timeout: .now() + 10) == .success
        try reader.inDatabase { db in try db.rollback() }
        if !answered { done.wait() }
        #expect(answered)
        #expect(folded.withLock { $0 } == false)
        #expect(Int64(fileSize(path + "-wal")) >= grown)
        #expect(try await store.allTasks().count == 10)
    }
}
