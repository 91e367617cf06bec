import Foundation
import GRDB
import HaulTestSupport
import Synchronization
import Testing

@testable import Haul

/// Writes that arrive while one runs share the next transaction, each still whole or not at all.
@Suite("Group commit: writes at once share a transaction", .timeLimit(.minutes(1)))
struct GroupCommitTests {
    struct Refused: Error {}

    /// Counts the commits of a database.
    final class CommitCount: TransactionObserver, Sendable {
        let commits = Mutex(0)
        func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
        func databaseDidChange(with event: DatabaseEvent) {}
        func databaseDidCommit(_ db: Database) { commits.withLock { $0 += 1 } }
        func databaseDidRollback(_ db: Database) {}
    }

    @Test("ten writes queued behind a running one commit together; one that throws undoes only its own rows")
    func shared() async throws {
        let temp = try TemporaryDirectory()
        let pool = try DatabasePool(path: temp.file("group.sqlite"))
        try await pool.write { try $0.execute(sql: "CREATE TABLE t (n INTEGER NOT NULL)") }
        let count = CommitCount()
        pool.add(transactionObserver: count, extent: .observerLifetime)
        let group = GroupCommit(writer: pool)

        // The first write holds the writer until the others wait behind it.
        let gate = DispatchSemaphore(value: 0)
        let (started, starting) = AsyncStream<Void>.makeStream()
        let first = Task {
            try await group.write { db in
                starting.yield()
                gate.wait()
                try db.execute(sql: "INSERT INTO t VALUES (0)")
                return 0
            }
        }
        for await _ in started { break }

        let results = Task {
            try await withThrowingTaskGroup(of: (Int, Result<Int, any Error>).self) { tasks in
                for n in 1...10 {
                    tasks.addTask {
                        do {
                            let value = try await group.write { db -> Int in
                                try db.execute(sql: "INSERT INTO t VALUES (?)", arguments: [n])
                                if n == 4 { throw Refused() }
                                // A constraint SQLite refuses: the statement fails, the transaction goes on.
                                if n == 7 { try db.execute(sql: "INSERT INTO t VALUES (NULL)") }
                                return n * 10
                            }
                            return (n, .success(value))
                        } catch {
                            return (n, .failure(error))
                        }
                    }
                }
                return try await tasks.reduce(into: [Int: Result<Int, any Error>]()) { $0[$1.0] = $1.1 }
            }
        }
        while group.waiting < 10 { await Task.yield() }
        gate.signal()

        #expect(try await first.value == 0)
        let outcomes = try await results.value
        for n in 1...10 {
            switch (n, outcomes[n]) {
            case (4, .failure(let error)): #expect(error is Refused)
            case (7, .failure(let error)): #expect((error as? DatabaseError)?.resultCode == .SQLITE_CONSTRAINT)
            case (_, .success(let value)): #expect(value == n * 10)
            default: Issue.record("write \(n): \(String(describing: outcomes[n]))")
            }
        }
        let rows = try await pool.read { try Int.fetchAll($0, sql: "SELECT n FROM t ORDER BY n") }
        #expect(rows == [0, 1, 2, 3, 5, 6, 8, 9, 10])
        // The first write alone, then the ten together.
        #expect(count.commits.withLock { $0 } == 2)
    }

    @Test("a write that makes SQLite roll the whole transaction back fails those before it; those after it commit next")
    func abandoned() async throws {
        let temp = try TemporaryDirectory()
        let pool = try DatabasePool(path: temp.file("group.sqlite"))
        try await pool.write { db in
            try db.execute(sql: "CREATE TABLE t (n INTEGER NOT NULL)")
            // What SQLite does on a full disk or an I/O error: the whole transaction is gone.
            try db.execute(
                sql:
                    "CREATE TRIGGER refuse BEFORE INSERT ON t WHEN NEW.n = 99 BEGIN SELECT RAISE(ROLLBACK, 'refused'); END"
            )
        }
        let group = GroupCommit(writer: pool)
        let gate = DispatchSemaphore(value: 0)
        let (started, starting) = AsyncStream<Void>.makeStream()
        let first = Task {
            try await group.write { db in
                starting.yield()
                gate.wait()
                try db.execute(sql: "INSERT INTO t VALUES (0)")
            }
        }
        for await _ in started { break }
        // Queued one after another, so that they run in this order.
        var writes: [(Int, Task<Void, any Error>)] = []
        for n in [1, 2, 99, 3, 4] {
            writes.append(
                (
                    n,
                    Task {
                        try await group.write { db in try db.execute(sql: "INSERT INTO t VALUES (?)", arguments: [n]) }
                    }
                )
            )
            while group.waiting < writes.count { await Task.yield() }
        }
        gate.signal()
        try await first.value
        var succeeded: [Int] = []
        for (n, write) in writes {
            if (try? await write.value) != nil { succeeded.append(n) }
        }
        #expect(succeeded == [3, 4])
        #expect(try await pool.read { try Int.fetchAll($0, sql: "SELECT n FROM t ORDER BY n") } == [0, 3, 4])
    }

    @Test("a write alone is a transaction of its own: its value returned, or its error with nothing kept")
    func alone() async throws {
        let temp = try TemporaryDirectory()
        let pool = try DatabasePool(path: temp.file("group.sqlite"))
        try await pool.write { try $0.execute(sql: "CREATE TABLE t (n INTEGER NOT NULL)") }
        let group = GroupCommit(writer: pool)
        #expect(
            try await group.write { db in
                try db.execute(sql: "INSERT INTO t VALUES (1)")
                return "one"
            } == "one"
        )
        await #expect(throws: Refused.self) {
            try await group.write { db in
                try db.execute(sql: "INSERT INTO t VALUES (2)")
                throw Refused()
            }
        }
        #expect(try await pool.read { try Int.fetchAll($0, sql: "SELECT n FROM t") } == [1])
        #expect(group.waiting == 0)
    }
}
