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

    /// A database with a table `t (n)` (and whatever `setUp` adds), in `temp`.
    private func database(in temp: TemporaryDirectory, setUp: String = "") async throws -> DatabasePool {
        let pool = try DatabasePool(path: temp.file("group.sqlite"))
        try await pool.write { try $0.execute(sql: "CREATE TABLE t (n INTEGER NOT NULL); " + setUp) }
        return pool
    }

    /// A write of 0 that holds the writer until `release` is called; returns once it runs, so
    /// that the writes made next wait behind it.
    private func holdWriter(_ group: GroupCommit) async -> (release: @Sendable () -> Void, write: Task<Void, any Error>)
    {
        let gate = DispatchSemaphore(value: 0)
        let (started, starting) = AsyncStream<Void>.makeStream()
        let write = Task {
            try await group.write { db in
                starting.yield()
                gate.wait()
                try db.execute(sql: "INSERT INTO t VALUES (0)")
            }
        }
        for await _ in started { break }
        return ({ gate.signal() }, write)
    }

    /// Whether a reader sees row `n`: only committed rows are there to see.
    private func committed(_ n: Int, in pool: DatabasePool) async throws -> Bool {
        try await pool.read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM t WHERE n = ?", arguments: [n]) } == 1
    }

    @Test(
        "ten writes queued behind a running one commit together, each returning once committed; one that throws undoes only its own rows"
    )
    func shared() async throws {
        let temp = try TemporaryDirectory()
        let pool = try await database(in: temp)
        let count = CommitCount()
        pool.add(transactionObserver: count, extent: .observerLifetime)
        let group = GroupCommit(writer: pool)
        let held = await holdWriter(group)

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
                            // Returned only once the shared transaction has committed.
                            #expect(try await committed(n, in: pool), "write \(n) returned before its commit")
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
        held.release()

        try await held.write.value
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

    @Test("writes queued together that all succeed share one transaction without a savepoint each")
    func togetherWithoutSavepoints() async throws {
        let temp = try TemporaryDirectory()
        let pool = try await database(in: temp)
        let count = CommitCount()
        pool.add(transactionObserver: count, extent: .observerLifetime)
        let savepoints = Mutex(0)
        try await pool.writeWithoutTransaction { db in
            db.trace { event in
                if case .statement(let statement) = event, statement.sql.hasPrefix("SAVEPOINT") {
                    savepoints.withLock { $0 += 1 }
                }
            }
        }
        let group = GroupCommit(writer: pool)
        let held = await holdWriter(group)
        let results = Task {
            try await withThrowingTaskGroup(of: (Int, Int).self) { tasks in
                for n in 1...10 {
                    tasks.addTask {
                        let value = try await group.write { db -> Int in
                            try db.execute(sql: "INSERT INTO t VALUES (?)", arguments: [n])
                            return try Int.fetchOne(db, sql: "SELECT COUNT(*) FROM t")!
                        }
                        return (n, value)
                    }
                }
                return try await tasks.reduce(into: [Int: Int]()) { $0[$1.0] = $1.1 }
            }
        }
        while group.waiting < 10 { await Task.yield() }
        held.release()
        try await held.write.value
        let counts = try await results.value
        // Each saw the rows of those before it in the shared transaction, its own included.
        #expect(Set(counts.values) == Set(2...11))
        #expect(try await pool.read { try Int.fetchAll($0, sql: "SELECT n FROM t ORDER BY n") } == Array(0...10))
        #expect(count.commits.withLock { $0 } == 2)
        #expect(savepoints.withLock { $0 } == 0)
    }

    @Test("a write that makes SQLite roll the whole transaction back fails those before it; those after it commit next")
    func abandoned() async throws {
        let temp = try TemporaryDirectory()
        // What SQLite does on a full disk or an I/O error: the whole transaction is gone.
        let pool = try await database(
            in: temp,
            setUp:
                "CREATE TRIGGER refuse BEFORE INSERT ON t WHEN NEW.n = 99 BEGIN SELECT RAISE(ROLLBACK, 'refused'); END"
        )
        let group = GroupCommit(writer: pool)
        let held = await holdWriter(group)
        // Queued one after another, so that they run in this order.
        var writes: [(Int, Task<Void, any Error>)] = []
        for n in [1, 2, 99, 3, 4] {
            let write = Task {
                try await group.write { db in try db.execute(sql: "INSERT INTO t VALUES (?)", arguments: [n]) }
            }
            writes.append((n, write))
            while group.waiting < writes.count { await Task.yield() }
        }
        held.release()
        try await held.write.value
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
        let pool = try await database(in: temp)
        let group = GroupCommit(writer: pool)
        let one = try await group.write { db in
            try db.execute(sql: "INSERT INTO t VALUES (1)")
            return "one"
        }
        #expect(one == "one")
        await #expect(throws: Refused.self) {
            try await group.write { db in
                try db.execute(sql: "INSERT INTO t VALUES (2)")
                throw Refused()
            }
        }
        #expect(try await pool.read { try Int.fetchAll($0, sql: "SELECT n FROM t") } == [1])
    }
}
