import Foundation

/// The time Haul waits and measures by: an injected clock (`ContinuousClock` in use, a test
/// clock in tests), read as the time since an origin taken from it.
///
/// `any Clock<Duration>` cannot compare two of its instants without knowing their type;
/// a timeline opens the clock once and gives plain durations, which its users store,
/// subtract and compare.
package struct Timeline: Sendable {
    /// The clock this timeline reads.
    package let clock: any Clock<Duration>
    private let elapsed: @Sendable () -> Duration
    private let wallDate: @Sendable () -> Date

    package init(_ clock: any Clock<Duration> = ContinuousClock()) {
        self.clock = clock
        let elapsed = Self.stopwatch(on: clock)
        self.elapsed = elapsed
        if clock is ContinuousClock {
            wallDate = { Date() }
        } else {
            // Another clock's dates move with it: a test clock's only when the test moves it.
            let origin = Date()
            wallDate = { origin.addingTimeInterval(elapsed().seconds) }
        }
    }

    private static func stopwatch<C: Clock<Duration>>(on clock: C) -> @Sendable () -> Duration {
        let origin = clock.now
        return { origin.duration(to: clock.now) }
    }

    /// The time since this timeline's origin.
    package var now: Duration { elapsed() }

    /// The date now: the system's for the continuous clock (what is stored and shown, such
    /// as a retry's next try, is a date); for another clock, its start's date moved on with it.
    package var date: Date { wallDate() }

    /// Waits `duration` on the clock; throws `CancellationError` when the task is cancelled.
    package func sleep(for duration: Duration) async throws {
        guard duration > .zero else { return try Task.checkCancellation() }
        try await clock.sleep(for: duration)
    }

    /// Waits until the timeline reads `deadline`.
    package func sleep(until deadline: Duration) async throws {
        try await sleep(for: deadline - now)
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    package var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
