import Foundation
import GRDB
import HaulTestSupport
import Synchronization
import Testing

@testable import Haul

/// What keeps a page of a million queued tasks to milliseconds, asserted as SQLite's plans
/// rather than as times: every listing, window and recovery page is read from the queue
/// order's index and stops at its limit — never the (background, state) index and a sort of
/// every task it names (270 ms for a page of 50 over a million).
@Suite("The store's plans for pages of a long queue", .timeLimit(.minutes(1)))
struct QueryPlanTests {
    @Test("listings, aria2's windows, pages after a task and recovery pages read task_on_queueOrder, and sort nothing")
    func pagesReadTheQueueOrder() async throws {
        let temp = try TemporaryDirectory()
        let store = try Store(path: temp.file("haul.sqlite"))
        let tasks = Self.tasks(40, in: temp) { index, task in
            task.background = index % 4 != 0
            task.state = index % 3 == 0 ? .paused : .queued
        }
        try await store.insertMany(tasks)
        let after = tasks[5].id
        let plans = try await store.read { db in
            try Self.plans(in: db, of: { $0.contains("ORDER BY") }) {
                _ = try TaskTables.infos(db, background: true, session: nil, page: TaskPage(limit: 50))
                _ = try TaskTables.infos(db, background: true, session: nil, page: TaskPage(limit: 10, after: after))
                _ = try TaskTables.infos(
                    db,
                    background: true,
                    session: nil,
                    page: TaskPage(limit: 10, offset: 3, states: [.paused, .queued], fromEnd: true)
                )
                _ = try TaskTables.tasks(db, inStates: [.queued, .paused], background: true, after: 7, limit: 10_000)
            }
        }
        #expect(plans.count == 4, "\(plans.map(\.0))")
        for (sql, plan) in plans {
            #expect(plan.contains { $0.contains("task_on_queueOrder") }, "\(sql): \(plan)")
            #expect(!plan.contains { $0.contains("TEMP B-TREE") }, "\(sql): \(plan)")
        }
    }

    @Test("a part file is looked up in the index of the tasks that have one, which holds no other task")
    func partFilesFromTheirOwnIndex() async throws {
        let temp = try TemporaryDirectory()
        let store = try Store(path: temp.file("haul.sqlite"))
        let tasks = Self.tasks(20, in: temp) { _, _ in }
        try await store.insertMany(tasks)
        let part = temp.file("0.part")
        #expect(try await store.claimPart(tasks[0].id, path: part, identity: "1:2"))
        #expect(try await !store.claimPart(tasks[1].id, path: part, identity: "1:3"))
        #expect(try await store.isPartPathTaken(part, byOtherThan: tasks[1].id))
        #expect(try await !store.isPartPathTaken(part, byOtherThan: tasks[0].id))
        let (plans, partial) = try await store.read { db in
            let plans = try Self.plans(in: db) {
                _ = try TaskTables.isPartPathTaken(db, part, byOtherThan: tasks[1].id)
                _ = try TaskRecord.filter(TaskRecord.Columns.partPath == part && TaskRecord.Columns.id != tasks[1].id)
                    .fetchCount(db)
            }
            // A partial index: the tasks without a part file have no entry in it.
            let partial = try Int.fetchOne(
                db,
                sql: "SELECT partial FROM pragma_index_list('task') WHERE name = 'task_on_partPath'"
            )
            return (plans, partial)
        }
        #expect(plans.count == 2, "\(plans.map(\.0))")
        for (sql, plan) in plans {
            #expect(plan.contains { $0.contains("task_on_partPath") }, "\(sql): \(plan)")
        }
        #expect(partial == 1)
        try await store.setPart(tasks[0].id, path: nil, identity: nil)
        #expect(try await !store.isPartPathTaken(part, byOtherThan: tasks[1].id))
    }

    /// `count` tasks of `http://h.test/INDEX` into `temp`, each shaped by `shape`.
    static func tasks(
        _ count: Int,
        in temp: TemporaryDirectory,
        _ shape: (Int, inout TaskRecord) -> Void
    ) -> [TaskRecord] {
        (0..<count).map { index in
            var task = StoreRecords.record("http://h.test/\(index)", into: temp.path)
            shape(index, &task)
            return task
        }
    }

    /// SQLite's plan of each `SELECT` that `body` runs on `db` (those `chosen`): the statement
    /// as run, with its plan's details.
    static func plans(
        in db: Database,
        of chosen: (String) -> Bool = { _ in true },
        _ body: () throws -> Void
    ) throws -> [(String, [String])] {
        let statements = Mutex<[String]>([])
        db.trace(options: .statement) { event in
            guard case .statement(let statement) = event, statement.sql.hasPrefix("SELECT") else { return }
            statements.withLock { $0.append(statement.expandedSQL) }
        }
        defer { db.trace(options: .statement, nil) }
        try body()
        return try statements.withLock { $0 }.filter(chosen).map { sql in
            (sql, try Row.fetchAll(db, sql: "EXPLAIN QUERY PLAN " + sql).map { $0["detail"] as String })
        }
    }
}
