/// Runs async operations one after another, in the order they were submitted: the next
/// starts when the one before it has ended, whatever they await meanwhile (an actor alone
/// would interleave them at each `await`).
actor SerialQueue {
    private var tail: Task<Void, Never>?

    func run<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        let previous = tail
        let task = Task {
            await previous?.value
            return try await operation()
        }
        tail = Task { _ = try? await task.value }
        return try await task.value
    }
}
