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
}
