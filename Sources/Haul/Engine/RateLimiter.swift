import Foundation
import Synchronization

/// A token bucket shared by the connections it limits, whose rate can change at any time.
///
/// Each received chunk takes its size in tokens. When the bucket is short, the taker
/// reserves the tokens anyway (the level goes below zero) and sleeps for exactly the time
/// the rate needs to pay them back — so connections queue up fairly and the flow is smooth
/// rather than bursts at each refill. While a connection sleeps it does not read from its
/// socket, and TCP slows the server down. The bucket holds at most a tenth of a second of
/// traffic (and no less than 64 KiB), so an idle pause never turns into a burst.
public final class RateLimiter: Sendable {
    private struct State {
        var rate: Double?
        /// The rate as given, so reading it back never converts a Double to Int64.
        var bytesPerSecond: Int64?
        var changed = false
        /// Counts changes, so a sleeping connection notices one.
        var generation = 0
        /// Connections waiting for tokens now.
        var sleepers = 0
        var level: Double = 0
        /// When the level was last brought up to date, on the limiter's timeline.
        var last: Duration = .zero

        mutating func set(_ value: Int64?) {
            let bounded = value.map { min($0, RateLimiter.maxBytesPerSecond) }
            bytesPerSecond = bounded
            rate = bounded.map(Double.init)
        }
    }

    /// The highest limit there is (1 TiB/s); higher values mean this.
    public static let maxBytesPerSecond: Int64 = 1 << 40

    private let state: Mutex<State>
    private let timeline: Timeline

    /// - Parameters:
    ///   - bytesPerSecond: the limit, or nil for none.
    ///   - clock: the clock it measures and waits by.
    public init(bytesPerSecond: Int64? = nil, clock: any Clock<Duration> = ContinuousClock()) {
        timeline = Timeline(clock)
        var initial = State()
        initial.set(bytesPerSecond)
        initial.last = timeline.now
        state = Mutex(initial)
    }

    /// The limit now, in bytes per second; nil when there is none.
    public var bytesPerSecond: Int64? { state.withLock { $0.bytesPerSecond } }

    /// How many connections are waiting for tokens now.
    var sleepingConnections: Int { state.withLock { $0.sleepers } }

    /// Changes the limit at once: connections waiting on the old rate stop waiting (the debt
    /// they ran up is forgiven) and the next chunk follows the new rate — so removing a
    /// 1 B/s limit does not leave a connection asleep for hours.
    public func setRate(_ bytesPerSecond: Int64?) {
        let now = timeline.now
        state.withLock { state in
            state.set(bytesPerSecond)
            state.changed = true
            state.generation += 1
            state.level = 0
            state.last = now
        }
    }

    /// Sets the rate a download starts with, unless ``setRate(_:)`` already changed it.
    func setInitialRate(_ bytesPerSecond: Int64?) {
        state.withLock { state in
            guard !state.changed else { return }
            state.set(bytesPerSecond)
        }
    }

    /// Takes `count` tokens, sleeping as long as the rate requires.
    func take(_ count: Int) async throws {
        var (wait, generation): (Double, Int) = state.withLock { state in
            // Unlimited: a lock, nothing more.
            guard let rate = state.rate, rate > 0 else { return (0, state.generation) }
            let now = timeline.now
            let seconds = (now - state.last).seconds
            let capacity = max(rate / 10, 65536)
            state.level = min(capacity, state.level + seconds * rate)
            state.last = now
            state.level -= Double(count)
            return (state.level < 0 ? -state.level / rate : 0, state.generation)
        }
        guard wait > 0 else { return }
        state.withLock { $0.sleepers += 1 }
        defer { state.withLock { $0.sleepers -= 1 } }
        // Sleep in slices of at most 100 ms, so a changed limit is noticed at once.
        while wait > 0 {
            let slice = min(wait, 0.1)
            try await timeline.sleep(for: .nanoseconds(Int64(slice * 1e9)))
            wait -= slice
            if state.withLock({ $0.generation }) != generation { return }
        }
    }
}
