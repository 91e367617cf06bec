import NIOPosix
import Synchronization

/// Where Haul's blocking file work runs: syncs, digests, renames, opening the store, and the
/// writes ``WritePlacement`` does not put on the event loop that read their bytes. Never
/// Swift's cooperative threads (there may be only two of them, and a blocked one stalls every
/// task), and not NIO's shared pool either, whose few threads would make one download's write
/// wait behind another's `fsync`.
enum FileIO {
    /// The most threads the pool has: enough that writes go on while several downloads sync.
    static let maxThreads = 16

    /// How many threads the pool starts with, read when it is first used
    /// (``Downloader/suggestFileThreads(_:)``).
    private static let suggestion = Mutex(maxThreads)

    /// The pool: its threads all start when it is first used.
    static let pool: NIOThreadPool = {
        let pool = NIOThreadPool(numberOfThreads: suggestion.withLock { $0 })
        pool.start()
        return pool
    }()

    /// Asks for `count` threads (1 to ``maxThreads``), taken if the pool has not started yet.
    static func suggest(threads count: Int) {
        suggestion.withLock { $0 = min(max(count, 1), maxThreads) }
    }

    /// Runs `body` on the pool; a cancelled caller whose work has not started gets a
    /// `CancellationError` and the work never runs.
    static func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await pool.runIfActive(body)
    }
}
