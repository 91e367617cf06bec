/// The time Haul waits and measures by: an injected clock (`ContinuousClock` in use, a test
/// clock in tests), read as the time since an origin taken from it.
///
/// `any Clock<Duration>` cannot compare two of its instants without knowing their type;
/// a timeline opens the clock once and gives plain durations, which its users store,
/// subtract and compare.
struct Timeline: Sendable {
    /// The clock this timeline reads.
    let clock: any Clock<Duration>
    private let elapsed: @Sendable () -> Duration

    init(_ clock: any Clock<Duration> = ContinuousClock()) {
        self.clock = clock
        self.elapsed = Self.stopwatch(on: clock)
    }

    private static func stopwatch<C: Clock<Duration>>(on clock: C) -> @Sendable () -> Duration {
        let origin = clock.now
        return { origin.duration(to: clock.now) }
    }

    /// The time since this timeline's origin.
    var now: Duration { elapsed() }

    /// Waits `duration` on the clock; throws `CancellationError` when the task is cancelled.
    func sleep(for duration: Duration) async throws {
        guard duration > .zero else { return try Task.checkCancellation() }
        try await clock.sleep(for: duration)
    }

    /// Waits until the timeline reads `deadline`.
    func sleep(until deadline: Duration) async throws {
        try await sleep(for: deadline - now)
    }
}

extension Duration {
    /// The duration in seconds, as a `Double`.
    var seconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
