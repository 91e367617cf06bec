import Foundation
import HaulTestSupport
import Logging
import PostgresNIO
import Synchronization
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
    /// A continuation resumed once, by whichever comes first.
    final class Once<T: Sendable>: Sendable {
        private let continuation: Mutex<CheckedContinuation<T, Never>?>

        init(_ continuation: CheckedContinuation<T, Never>) {
            self.continuation = Mutex(continuation)
        }

        func resume(_ value: T) {
            continuation.withLock {
                $0?.resume(returning: value)
                $0 = nil
            }
        }
    }

    /// The result of `task`, or nil when it has not ended within `limit` (it is left to run:
    /// a wait on a connection nobody answers cannot be cancelled, and must not hold the suite).
    static func outcome<T: Sendable>(of task: Task<T, any Error>, within limit: Duration) async -> Result<T, any Error>?
    {
        await withCheckedContinuation { continuation in
            let once = Once(continuation)
            Task { once.resume(await task.result) }
            Task {
                try? await Task.sleep(for: limit)
                once.resume(nil)
            }
        }
    }

    @Test("a statement after the server ended the transaction fails at once; the next operation works")
    func endedTransaction() async throws {
        guard let server = PostgresServer.current else { return }
        let location = try await server.newDatabase()
        let logger = FleetQueueTests.logger
        let run = Task { () -> String in
            let store = try await PostgresStore.connect(
                to: location,
                node: "stalled",
                leaseDuration: .seconds(1),
                logger: logger
            )
            var sentence = ""
            do {
                try await Postgres.run("record a test row") {
                    try await store.client.withCheckedTransaction(logger: logger) { connection in
                        _ = try await connection.checkedQuery("SELECT 1", logger: logger)
                        // Idle in the transaction past the lease: the server ends it. (Not the
                        // test clock: the server's own timer is what is tested.)
                        try? await connection.closeFuture.get()
                        _ = try await connection.checkedQuery("SELECT 2", logger: logger)
                    }
                }
            } catch let error as HaulError {
                sentence = error.message
            }
            _ = try await store.infos(ids: nil, background: true, session: nil)
            try await store.closeDatabase()
            return sentence
        }
        let outcome = await Self.outcome(of: run, within: .seconds(120))
        let sentence = try #require(try outcome?.get(), "a statement on the closed connection never ended")
        #expect(sentence.contains("the database had closed the connection"), "\(sentence)")
    }
}
