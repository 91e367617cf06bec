import Synchronization

/// Runs `operation` until `alternative` returns, whichever comes first, without cancelling
/// the operation: one that cannot be stopped safely (a database transaction under way, a
/// request waiting for a connection) ends by itself later, its result dropped.
/// - Returns: the operation's result, or nil when `alternative` returned first.
package func valueOrNil<T: Sendable>(
    of operation: @escaping @Sendable () async throws -> T,
    unlessFirst alternative: @escaping @Sendable () async -> Void
) async throws -> T? {
    try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<T?, any Error>) in
        let first = FirstOf(continuation)
        let waiter = Task {
            await alternative()
            if !Task.isCancelled { first.resume(with: .success(nil)) }
        }
        Task {
            do {
                first.resume(with: .success(try await operation()))
            } catch {
                first.resume(with: .failure(error))
            }
            waiter.cancel()
        }
    }
}

/// The continuation two racers resume: the first one's result, once.
private final class FirstOf<T: Sendable>: Sendable {
    private let waiting: Mutex<CheckedContinuation<T?, any Error>?>

    init(_ continuation: CheckedContinuation<T?, any Error>) {
        waiting = Mutex(continuation)
    }

    func resume(with result: Result<T?, any Error>) {
        waiting.withLock { $0.take() }?.resume(with: result)
    }
}
