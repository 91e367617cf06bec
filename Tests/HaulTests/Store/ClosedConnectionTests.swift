import Foundation
import Logging
import PostgresNIO
import Testing

@testable import Haul
@testable import HaulPostgres

/// A transaction the server ended — idle past the lease (`idle_in_transaction_session_timeout`),
/// as on a stalled node or a machine too loaded to run it — fails at once, in a sentence,
/// and the store goes on. postgres-nio never answered a query written to the closed
/// connection: the node's next statement, its heartbeat and its stop waited for ever, and a
/// test suite with them.
@Suite("A connection the database closed", .postgresServer, .timeLimit(.minutes(3)))
struct ClosedConnectionTests {
    @Test("a statement after the server ended the transaction fails at once; the next operation works")
    func endedTransaction() async throws {
        guard let server = PostgresServer.current else { return }
        let location = try await server.newDatabase()
        let logger = FleetQueueTests.logger
        let store = try await PostgresStore.connect(
            to: location,
            node: "stalled",
            leaseDuration: .seconds(1),
            logger: logger
        )
        let ended = await #expect(throws: (any Error).self) {
            try await Postgres.run("record a test row") {
                try await store.client.withCheckedTransaction(logger: logger) { connection in
                    _ = try await connection.checkedQuery("SELECT 1", logger: logger)
                    // Idle in the transaction past the lease: the server ends it. (Not the
                    // test clock: the server's own timer is what is tested.)
                    while !connection.isClosed { try await Task.sleep(for: .milliseconds(100)) }
                    _ = try await connection.checkedQuery("SELECT 2", logger: logger)
                }
            }
        }
        let sentence = (ended as? HaulError)?.message ?? ""
        #expect(sentence.contains("the database had closed the connection"), "\(sentence)")
        #expect(try await store.infos(ids: nil, background: true, session: nil).isEmpty)
        try await store.closeDatabase()
    }
}
