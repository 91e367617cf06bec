/// What one run of a transfer has spent of its tries, and whether it may try again: a pure
/// value (no I/O, no clock), so each rule is tested on its own.
///
/// - A failure that may pass is retried while fewer than `maxRetries` came in a row without
///   progress. Progress is reaching further than ever in this run: a server that breaks off
///   every whole-file response at the same point makes none, though each one writes bytes,
///   and a connection too slow to keep (the speed floor) is no progress either.
/// - A file that changed during the download starts over from byte 0, at most `maxRestarts`
///   times in a run.
struct RetryBudget: Sendable, Equatable {
    let maxRetries: Int
    let maxRestarts: Int
    /// Failures in the current streak without progress.
    private(set) var failures = 0
    /// Restarts from 0 in this run.
    private(set) var restarts = 0
    /// The furthest committed offset this run has reached.
    private(set) var furthest: Int64

    init(maxRetries: Int, maxRestarts: Int, committed: Int64) {
        self.maxRetries = maxRetries
        self.maxRestarts = maxRestarts
        self.furthest = committed
    }

    /// Counts a failure that may pass, with `committed` bytes written now; returns the
    /// attempt it is (1 for the first in a streak), or nil when the retries ran out.
    /// - Parameter countsAsProgress: false for a failure whose bytes are no progress (a
    ///   connection below the speed floor).
    mutating func failed(committed: Int64, countsAsProgress: Bool = true) -> Int? {
        let progressed = committed > furthest
        if progressed { furthest = committed }
        if progressed, countsAsProgress { failures = 0 }
        failures += 1
        return failures <= maxRetries ? failures : nil
    }

    /// Counts a restart from 0; false when the restarts ran out.
    mutating func restarted() -> Bool {
        restarts += 1
        return restarts <= maxRestarts
    }
}
