import Foundation
import HaulDaemon
import HaulTestSupport
import HaulTesting
import HaulWire
import PostgresNIO
import Testing

@testable import Haul
@testable import HaulPostgres

/// The note that wakes the other nodes' followers when events are appended: sent by the
/// append's own statement, heard once its transaction commits.
@Suite("Fleet: appended events wake the other nodes", .postgresServer, .timeLimit(.minutes(5)))
struct FleetEventSignalTests {
    @Test("a batch appended on one node: another node hears 'events', and the states told are recorded")
    func appendSignalsEvents() async throws {
        try await FleetQueueTests.withDatabase { client in
            let a = try await FleetQueueTests.node(client, "a")
            let b = try await FleetQueueTests.node(client, "b")
            let ids = try await FleetQueueTests.add(a, 2)
            var notes = b.fleetSignals().makeAsyncIterator()
            // Ready once b listens: it says so with 'resumed' (look again: from now on no note
            // is missed).
            #expect(await notes.next() == .resumed)
            var started = EventRecord(taskID: ids[0], kind: .state, session: "default")
            started.to = .running
            let completed = EventRecord(taskID: ids[1], kind: .completed, session: "default")
            let logged = try await a.appendEvents([started, completed])
            #expect(logged.compactMap(\.eventID).count == 2)
            #expect(logged.map(\.taskID) == [ids[0], ids[1]])
            // The note comes with the append's commit (the suite's time limit bounds the wait).
            #expect(await notes.next() == .events)
            let told = try await client.query(
                "SELECT id, \"announcedState\" FROM haul_task WHERE id = ANY(\(ids)::uuid[]) ORDER BY id"
            ).decode((UUID, String?).self).collected()
            #expect(Set(told.map { "\($0.0) \($0.1 ?? "-")" }) == ["\(ids[0]) running", "\(ids[1]) completed"])
            try await a.closeDatabase()
            try await b.closeDatabase()
        }
    }
}
