import Logging
import PostgresNIO

/// A query asked on a connection the server had already closed.
struct ConnectionClosed: Error {}

extension PostgresConnection {
    /// `query`, refused at once on a closed connection. postgres-nio writes a query to its
    /// channel without waiting for the write: to a closed channel the write fails unseen,
    /// and the query is never answered. The server closes a connection whose transaction
    /// stayed idle past the lease (`idle_in_transaction_session_timeout`: a stalled node, or a
    /// machine too loaded to run it): the node's next statement then waited for ever, and so
    /// did its heartbeat, its stop, and a test suite.
    func checkedQuery(
        _ query: PostgresQuery,
        logger: Logger,
        file: String = #fileID,
        line: Int = #line
    ) async throws -> PostgresRowSequence {
        guard !isClosed else { throw ConnectionClosed() }
        return try await self.query(query, logger: logger, file: file, line: line)
    }

    /// A transaction on this connection: `BEGIN`, `body`, then `COMMIT`, or `ROLLBACK` when
    /// `body` throws (unless the connection is closed, which ended the transaction already).
    /// The body's error goes up as it is.
    func withCheckedTransaction<Result>(
        logger: Logger,
        isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection) async throws -> sending Result
    ) async throws -> sending Result {
        _ = try await checkedQuery("BEGIN", logger: logger)
        let result: Result
        do {
            result = try await body(self)
        } catch {
            if !isClosed { _ = try? await checkedQuery("ROLLBACK", logger: logger) }
            throw error
        }
        _ = try await checkedQuery("COMMIT", logger: logger)
        return result
    }
}

extension PostgresClient {
    /// A transaction on a connection of the pool (``PostgresConnection/withCheckedTransaction(logger:_:)``).
    func withCheckedTransaction<Result>(
        logger: Logger,
        isolation: isolated (any Actor)? = #isolation,
        _ body: (PostgresConnection) async throws -> sending Result
    ) async throws -> sending Result {
        try await withConnection(isolation: isolation) { connection in
            try await connection.withCheckedTransaction(logger: logger, isolation: isolation, body)
        }
    }
}
