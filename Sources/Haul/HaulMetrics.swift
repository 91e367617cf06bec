import Foundation
import Metrics

/// What Haul reports through swift-metrics: bytes received, connections running, retries and
/// failures by error class, the time of each `fdatasync` and checkpoint, and how long tasks
/// waited in the queue. A program chooses where they go by bootstrapping `MetricsSystem`
/// (the daemon: Prometheus, on `/metrics`); without that they cost next to nothing.
///
/// Each metric is made when it is recorded, not kept: one made before the program
/// bootstraps its backend would report to no backend forever.
package enum HaulMetrics {
    /// Bytes of downloads written to part files.
    static func received(_ bytes: Int) {
        Counter(label: "haul_bytes_received_total").increment(by: bytes)
    }

    /// A connection starts (`true`) or ends (`false`).
    static func connection(open: Bool) {
        let meter = Meter(label: "haul_running_connections")
        if open { meter.increment() } else { meter.decrement() }
    }

    /// A run of a download is tried again after an error of this class.
    static func retry(_ code: HaulError.Code) {
        Counter(label: "haul_retries_total", dimensions: [("class", code.description)]).increment()
    }

    /// A download failed for good with an error of this class.
    static func failure(_ code: HaulError.Code) {
        Counter(label: "haul_failures_total", dimensions: [("class", code.description)]).increment()
    }

    /// An `fdatasync` of a part file took this long.
    static func fsync(_ duration: Duration) {
        Timer(label: "haul_fsync_seconds").recordNanoseconds(duration.nanoseconds)
    }

    /// A checkpoint (the sync and the store's record) took this long.
    static func checkpoint(_ duration: Duration) {
        Timer(label: "haul_checkpoint_seconds").recordNanoseconds(duration.nanoseconds)
    }

    /// A task waited this long between being queued and starting.
    static func queueWait(_ seconds: TimeInterval) {
        Timer(label: "haul_queue_wait_seconds").recordNanoseconds(Int64(max(0, seconds) * 1e9))
    }
}
