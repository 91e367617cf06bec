import Foundation
import HaulPostgres
import HaulTestSupport
import Testing

@testable import Haul

/// A listing a page at a time (``TaskPage``), on both engines: pages in queue order, each
/// after the last task of the one before, of one session when asked; a page after a task
/// removed since is refused, not answered from the start.
@Suite("Task store engines: pages of tasks", .postgresServer, .timeLimit(.minutes(5)))
struct TaskPageTests {
    @Test(
        "seven tasks in pages of three: 3, 3, 1, then none; one session's pages; a removed task's page refused",
        arguments: StoreEngine.allCases
    )
    func pages(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withStore(temp) { store in
            var ids: [UUID] = []
            for index in 0..<7 {
                var reAdd = StoreRecords.plainReAdd
                reAdd.session = index % 2 == 0 ? "even" : "odd"
                let record = StoreRecords.record("http://h.test/\(index)", into: temp.path, session: reAdd.session)
                ids.append(try await store.findOrInsert(record, reAdd: reAdd) { _ in }.record.id)
            }
            // Moved to the back of the line: its page is the last.
            _ = try await store.requeue(ids[1], state: .queued)
            let order = [ids[0], ids[2], ids[3], ids[4], ids[5], ids[6], ids[1]]
            var listed: [[UUID]] = []
            var after: UUID?
            repeat {
                let page = try await store.infos(
                    page: try TaskPage(limit: 3, after: after),
                    background: nil,
                    session: nil
                )
                listed.append(page.map(\.id))
                after = page.last?.id
            } while after != nil
            #expect(listed == [Array(order[0..<3]), Array(order[3..<6]), [ids[1]], []])
            #expect(try await store.infos(ids: nil, background: nil, session: nil).map(\.id) == order)

            let odd = try await store.infos(page: try TaskPage(limit: 2), background: nil, session: "odd")
            #expect(odd.map(\.id) == [ids[3], ids[5]])
            let rest = try await store.infos(
                page: try TaskPage(limit: 2, after: ids[5]),
                background: true,
                session: "odd"
            )
            #expect(rest.map(\.id) == [ids[1]])
            #expect(try await store.infos(page: try TaskPage(limit: 2), background: false, session: nil).isEmpty)

            try await store.delete(ids[3])
            let error = await #expect(throws: HaulError.self) {
                _ = try await store.infos(page: try TaskPage(limit: 3, after: ids[3]), background: nil, session: nil)
            }
            #expect(error?.code == .notFound)
            #expect(
                error?.message == "No task \(ids[3].shown) to list after: it was removed since the page that showed it"
            )
            #expect(throws: HaulError.self) { try TaskPage(limit: 0) }
            #expect(throws: HaulError.self) { try TaskPage(limit: TaskPage.maxLimit + 1) }
        }
    }

    @Test(
        "records a page at a time, as a manager's recovery reads them: past a place in the queue, of some states, at most a limit",
        arguments: StoreEngine.allCases
    )
    func recordPages(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withStore(temp) { store in
            var records: [TaskRecord] = []
            for index in 0..<7 {
                let record = StoreRecords.record("http://h.test/\(index)", into: temp.path)
                records.append(try await store.findOrInsert(record, reAdd: StoreRecords.plainReAdd) { _ in }.record)
            }
            try await store.setState(records[2].id, .paused)
            let queued = try await store.tasks(inStates: [.queued], background: true, after: nil, limit: 3)
            #expect(queued.map(\.id) == [0, 1, 3].map { records[$0].id })
            let next = try await store.tasks(
                inStates: [.queued],
                background: true,
                after: queued[2].queueOrder,
                limit: 3
            )
            #expect(next.map(\.id) == [4, 5, 6].map { records[$0].id })
            let all = try await store.tasks(
                inStates: TaskState.allCases,
                background: nil,
                after: records[4].queueOrder,
                limit: nil
            )
            #expect(all.map(\.id) == [5, 6].map { records[$0].id })
            #expect(
                try await store.tasks(inStates: TaskState.allCases, background: false, after: nil, limit: 5).isEmpty
            )
        }
    }
}
