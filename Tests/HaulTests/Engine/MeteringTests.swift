import Foundation
import HaulClient
import HaulTestSupport
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul
@testable import HaulCLI

/// The small values behind progress and limits, tested without a network or a clock's mercy.
@Suite("Speed, limits and sizes", .timeLimit(.minutes(10)))
struct MeteringTests {
    // MARK: SpeedMeter

    @Test("the speed is 0 until a whole window has passed, then the bytes over the time")
    func speedNeedsAWindow() {
        var meter = SpeedMeter(window: .seconds(1), keep: .seconds(3))
        let start = Duration.seconds(1000)
        #expect(meter.record(bytes: 0, at: start) == 0)
        #expect(meter.record(bytes: 500_000, at: start + .milliseconds(500)) == 0)
        #expect(meter.record(bytes: 1_000_000, at: start + .seconds(1)) == 1_000_000)
        #expect(meter.record(bytes: 3_000_000, at: start + .seconds(2)) == 1_500_000)
    }

    @Test("old samples leave the window: a transfer that stops reads 0 once they are gone")
    func speedForgets() {
        var meter = SpeedMeter(window: .seconds(1), keep: .seconds(3))
        let start = Duration.seconds(1000)
        var now = start
        for tenth in 0...30 {  // 1 MB/s for 3 s, sampled every 100 ms
            now = start + .milliseconds(100 * tenth)
            _ = meter.record(bytes: Int64(tenth) * 100_000, at: now)
        }
        let moving = meter.record(bytes: 3_000_000, at: now + .milliseconds(100))
        #expect(moving > 800_000 && moving < 1_100_000, "\(moving)")
        var speed = moving
        for tenth in 2...50 {  // nothing more arrives for 5 s
            speed = meter.record(bytes: 3_000_000, at: now + .milliseconds(100 * tenth))
        }
        #expect(speed == 0)
    }

    @Test("a byte count that goes back (a restart from 0) starts the meter over")
    func speedRestarts() {
        var meter = SpeedMeter(window: .seconds(1), keep: .seconds(3))
        let start = Duration.seconds(1000)
        _ = meter.record(bytes: 0, at: start)
        #expect(meter.record(bytes: 5_000_000, at: start + .seconds(2)) == 2_500_000)
        #expect(meter.record(bytes: 10, at: start + .seconds(3)) == 0)
        #expect(meter.record(bytes: 1_000_010, at: start + .seconds(4)) == 1_000_000)
    }

    // MARK: RateLimiter

    @Test("a starting rate never overrides a rate changed live; any rate is held below 1 TiB/s")
    func limiterRates() {
        let changed = RateLimiter()
        changed.setRate(5_000)
        changed.setInitialRate(10_000)
        #expect(changed.bytesPerSecond == 5_000)

        let fresh = RateLimiter()
        fresh.setInitialRate(10_000)
        #expect(fresh.bytesPerSecond == 10_000)

        let huge = RateLimiter()
        huge.setRate(.max)
        #expect(huge.bytesPerSecond == RateLimiter.maxBytesPerSecond)
        huge.setRate(nil)
        #expect(huge.bytesPerSecond == nil)
    }

    @Test(
        "a connection asleep on a 1 B/s limit wakes when the limit is raised or removed",
        arguments: [nil, 1_000_000_000]
    )
    func limiterWakes(newRate: Int64?) async throws {
        let limiter = RateLimiter(bytesPerSecond: 1)
        // A megabyte at 1 B/s: eleven days, unless the change wakes it.
        let taker = Task { try await limiter.take(1_000_000) }
        #expect(try await waitUntil { limiter.sleepingConnections == 1 })
        limiter.setRate(newRate)
        try await taker.value
        #expect(limiter.sleepingConnections == 0)
        // The next chunk follows the new rate: no debt from the old one.
        try await limiter.take(1_000)
        #expect(limiter.sleepingConnections == 0)
    }

    @Test("an unlimited limiter never puts a connection to sleep")
    func limiterUnlimited() async throws {
        let limiter = RateLimiter()
        for _ in 0..<1_000 { try await limiter.take(1 << 20) }
        #expect(limiter.sleepingConnections == 0)
    }

    // MARK: Sizes on the command line

    @Test(
        "sizes: binary suffixes, an optional B or iB, plain bytes",
        arguments: [
            ("0", 0), ("500", 500), ("500K", 512_000), ("500k", 512_000), ("10M", 10 << 20), ("10MB", 10 << 20),
            ("10MiB", 10 << 20), ("1.5G", 1_610_612_736), ("2T", 2 << 40), (" 64K ", 65_536), ("1b", 1),
        ] as [(String, Int64)]
    )
    func sizes(text: String, bytes: Int64) {
        #expect(ByteCount(argument: text)?.bytes == bytes)
    }

    @Test(
        "sizes that are not sizes are refused",
        arguments: ["", "K", "-1", "-1M", "1X", "nan", "inf", "1e30", "9000000T", "1..5M", "M10"]
    )
    func badSizes(text: String) {
        #expect(ByteCount(argument: text) == nil)
    }
}
