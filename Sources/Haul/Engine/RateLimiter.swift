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
        var changed = false
        var level: Double = 0
        var last: ContinuousClock.Instant = .now
    }

    private let state: Mutex<State>

    /// - Parameter bytesPerSecond: the limit, or nil for none.
    public init(bytesPerSecond: Int64? = nil) {
        state = Mutex(State(rate: bytesPerSecond.map(Double.init)))
    }

    /// The limit now, in bytes per second; nil when there is none.
    public var bytesPerSecond: Int64? { state.withLock { $0.rate.map { Int64($0) } } }

    /// Changes the limit; connections waiting now finish their current wait, the next chunk
    /// follows the new rate.
    public func setRate(_ bytesPerSecond: Int64?) {
        state.withLock { state in
            state.rate = bytesPerSecond.map(Double.init)
            state.changed = true
            state.level = min(state.level, 0)
            state.last = .now
        }
    }

    /// Sets the rate a download starts with, unless ``setRate(_:)`` already changed it.
    func setInitialRate(_ bytesPerSecond: Int64?) {
        state.withLock { state in
            guard !state.changed else { return }
            state.rate = bytesPerSecond.map(Double.init)
        }
    }

    /// Takes `count` tokens, sleeping as long as the rate requires.
    func take(_ count: Int) async throws {
        let wait: Double = state.withLock { state in
            guard let rate = state.rate, rate > 0 else { return 0 }  // Unlimited: a lock, nothing more.
            let now = ContinuousClock.now
            let elapsed = now - state.last
            let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
            let capacity = max(rate / 10, 65536)
            state.level = min(capacity, state.level + seconds * rate)
            state.last = now
            state.level -= Double(count)
            return state.level < 0 ? -state.level / rate : 0
        }
        if wait > 0 { try await Task.sleep(for: .nanoseconds(Int64(wait * 1e9))) }
    }
}
