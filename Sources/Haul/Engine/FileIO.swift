import NIOPosix

/// Where Haul's blocking file work runs: syncs, digests, renames, opening the store, and the
/// writes ``WritePlacement`` does not put on the event loop that read their bytes. Never
/// Swift's cooperative threads (there may be only two of them, and a blocked one stalls every
/// task), and not NIO's shared pool either, whose few threads would make one download's write
/// wait behind another's `fsync`.
enum FileIO {
    /// Threads enough that writes go on while several downloads sync.
    static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: 16)
        pool.start()
        return pool
    }()

    /// Runs `body` on the pool; a cancelled caller whose work has not started gets a
    /// `CancellationError` and the work never runs.
    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.runIfActive(body)
    }
}
