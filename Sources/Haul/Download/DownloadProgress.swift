import Foundation
import Synchronization

/// A snapshot of one download's progress.
public struct DownloadProgress: Sendable, Equatable {
    /// Bytes of the file on disk so far, including those from earlier runs.
    public var bytesReceived: Int64
    /// The file's full length, when the server said.
    public var totalBytes: Int64?
    /// Bytes received by this run (since it started or resumed).
    public var bytesThisRun: Int64
    /// The offset this run resumed from, when it continued earlier work.
    public var resumedFrom: Int64?
    /// Average speed over the last few seconds (a window of at least one second), in bytes per second.
    public var bytesPerSecond: Double
    /// The file name, once known.
    public var fileName: String?
    /// While the download waits before trying again: why, and for how long.
    public var waiting: RetryWait?
    /// Retries this run has made so far (every connection's together); each new one is
    /// ``lastRetry``. A reader that samples progress sees each retry by this count rising,
    /// even when the wait was over before it looked.
    public var retries: Int = 0
    /// The most recent retry of this run, kept after its wait ended.
    public var lastRetry: RetryWait?

    /// A pause between a failure and the next attempt.
    public struct RetryWait: Sendable, Equatable {
        /// The failure being retried, in one sentence.
        public var reason: String
        /// How long this wait lasts.
        public var delay: Duration
        /// Whether the server set the delay (`Retry-After`) rather than Haul's backoff.
        public var serverAsked: Bool
        /// Which retry in a row without progress this is (1-based).
        public var attempt: Int = 1
        /// The retries allowed in a row without progress (``RetryPolicy/maxRetries``).
        public var maxRetries: Int = 0
    }

    /// The fraction done, 0...1, when the total is known.
    public var fractionCompleted: Double? {
        guard let totalBytes, totalBytes > 0 else { return nil }
        return min(1, Double(bytesReceived) / Double(totalBytes))
    }

    /// Estimated time to finish at the current speed, when both are known.
    public var estimatedTimeRemaining: Duration? {
        guard let totalBytes, bytesPerSecond > 0 else { return nil }
        let seconds = Double(max(0, totalBytes - bytesReceived)) / bytesPerSecond
        return .milliseconds(Int64(seconds * 1000))
    }
}

/// The live counters a transfer updates per chunk and readers sample.
///
/// The hot path is one lock and two additions; speed is worked out only when someone reads,
/// from samples kept at most every 100 ms over a sliding window of at least one second, on
/// the transfer's timeline (a test clock in tests).
final class ProgressBox: Sendable {
    private struct State {
        var progress = DownloadProgress(
            bytesReceived: 0,
            totalBytes: nil,
            bytesThisRun: 0,
            resumedFrom: nil,
            bytesPerSecond: 0,
            fileName: nil
        )
        var meter = SpeedMeter()
    }

    private let state = Mutex(State())
    private let timeline: Timeline

    init(timeline: Timeline = Timeline()) {
        self.timeline = timeline
    }

    func update(_ body: (inout DownloadProgress) -> Void) {
        state.withLock { body(&$0.progress) }
    }

    func add(_ bytes: Int) {
        state.withLock {
            $0.progress.bytesReceived += Int64(bytes)
            $0.progress.bytesThisRun += Int64(bytes)
        }
    }

    /// Sleeps `delay` on `timeline` before retry number `attempt` of `maxRetries` after
    /// `error`, showing the wait in the progress meanwhile.
    /// `announce` is given the progress once the wait is in it.
    func waiting(
        _ delay: Duration,
        after error: HaulError,
        attempt: Int,
        of maxRetries: Int,
        on timeline: Timeline,
        announce: (DownloadProgress) -> Void = { _ in }
    ) async throws {
        update {
            let wait = DownloadProgress.RetryWait(
                reason: error.message,
                delay: delay,
                serverAsked: error.retryAfter != nil,
                attempt: attempt,
                maxRetries: maxRetries
            )
            $0.waiting = wait
            $0.lastRetry = wait
            $0.retries += 1
        }
        defer { update { $0.waiting = nil } }
        announce(snapshot())
        try await timeline.sleep(for: delay)
    }

    func snapshot() -> DownloadProgress {
        let now = timeline.now
        return state.withLock { state in
            state.progress.bytesPerSecond = state.meter.record(bytes: state.progress.bytesThisRun, at: now)
            return state.progress
        }
    }
}

/// Speed over a sliding window: bytes between the oldest sample at least `window` old and now.
struct SpeedMeter: Sendable {
    private var samples: [(time: Duration, bytes: Int64)] = []
    let window: Duration
    let keep: Duration

    init(window: Duration = .seconds(1), keep: Duration = .seconds(3)) {
        self.window = window
        self.keep = keep
    }

    /// Records a cumulative byte count at `now` (a timeline's reading) and returns bytes per
    /// second over the window (0 until a full window has passed).
    mutating func record(bytes: Int64, at now: Duration) -> Double {
        if let last = samples.last, bytes < last.bytes { samples.removeAll() }
        if samples.last.map({ now - $0.time >= .milliseconds(100) }) ?? true {
            samples.append((now, bytes))
        }
        while samples.count > 2, now - samples[1].time >= keep { samples.removeFirst() }
        guard let first = samples.first else { return 0 }
        let elapsed = now - first.time
        guard elapsed >= window else { return 0 }
        return Double(bytes - first.bytes) / elapsed.seconds
    }
}
