import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// The task-level retry decision, as a value: a run's own retries (how many in a row, what
/// progress is, how long each waits, a `Retry-After` honoured or refused) and a manager's
/// keeping on trying (its backoff in minutes, a streak and its end).
@Suite("Retry decisions", .timeLimit(.minutes(1)))
struct RetryDecisionTests {
    static let policy = RetryPolicy(
        maxRetries: 3,
        baseDelay: .seconds(1),
        maxDelay: .seconds(8),
        maxRetryAfter: .seconds(60)
    )
    static let reset = HaulError(.connection, "The connection was reset", url: URL(string: "http://h.test/f"))

    /// The delays and attempts of `decisions`, or where it gave up.
    static func waits(_ decisions: [RetryDecision]) -> [String] {
        decisions.map {
            switch $0 {
            case .retry(let delay, let attempt): "\(attempt): \(delay)"
            case .giveUp(let error): "gave up: \(error.hint ?? "")"
            }
        }
    }

    @Test("three retries in a row without progress, doubling (random 1: the ceiling), then given up saying so")
    func runOutWithoutProgress() {
        var budget = RetryBudget(maxRetries: 3, maxRestarts: 3, committed: 100)
        let decisions = (0..<4).map { _ in
            RetryDecision.transfer(after: Self.reset, committed: 100, budget: &budget, policy: Self.policy, random: 1)
        }
        #expect(
            Self.waits(decisions) == [
                "1: 1.0 seconds", "2: 2.0 seconds", "3: 4.0 seconds",
                "gave up: Gave up after 3 retries; \(HaulError.rerunToResume)",
            ]
        )
    }

    @Test("bytes beyond the furthest offset start a new streak; a trickle too slow to keep does not")
    func progressAndTrickle() throws {
        var budget = RetryBudget(maxRetries: 3, maxRestarts: 3, committed: 0)
        _ = RetryDecision.transfer(after: Self.reset, committed: 0, budget: &budget, policy: Self.policy, random: 0)
        _ = RetryDecision.transfer(after: Self.reset, committed: 0, budget: &budget, policy: Self.policy, random: 0)
        let afterProgress = RetryDecision.transfer(
            after: Self.reset,
            committed: 5_000,
            budget: &budget,
            policy: Self.policy,
            random: 0
        )
        // Random 0: half the ceiling, never less.
        #expect(Self.waits([afterProgress]) == ["1: 0.5 seconds"])
        let slow = SpeedFloor(try LowestSpeed(bytesPerSecond: 1000, time: .seconds(30)), start: .zero).failure(
            url: URL(string: "http://h.test/f")!
        )
        let trickles = (0..<3).map { index in
            RetryDecision.transfer(
                after: slow,
                committed: 6_000 + Int64(index) * 1_000,
                budget: &budget,
                policy: Self.policy,
                random: 1
            )
        }
        #expect(Self.waits(trickles).map { $0.prefix(2) } == ["2:", "3:", "ga"])
    }

    @Test("a Retry-After is the wait when it is within the policy's; a longer one is given up on, in one sentence")
    func retryAfter() {
        var budget = RetryBudget(maxRetries: 3, maxRestarts: 3, committed: 0)
        var busy = HaulError(.httpStatus, "HTTP 503 Service Unavailable", url: URL(string: "http://h.test/f"))
        busy.retryAfter = .seconds(45)
        #expect(
            Self.waits([RetryDecision.transfer(after: busy, committed: 0, budget: &budget, policy: Self.policy)])
                == ["1: 45.0 seconds"]
        )
        busy.retryAfter = .seconds(3600)
        guard
            case .giveUp(let error) = RetryDecision.transfer(
                after: busy,
                committed: 0,
                budget: &budget,
                policy: Self.policy
            )
        else {
            Issue.record("a Retry-After of an hour was waited for")
            return
        }
        #expect(
            error.message.hasSuffix(
                "asked to wait 60 min before trying again (Retry-After), longer than the 60 s Haul waits"
            )
        )
        #expect(!error.isRetryable)
    }

    @Test(
        "keeping on trying: 30 s, 60 s, 120 s (random 0: the ceiling); progress starts a new streak; it gives up once the streak has lasted giveUpAfter"
    )
    func keepTrying() {
        let policy = KeepTrying(giveUpAfter: .seconds(600), firstDelay: .seconds(30), maxDelay: .seconds(600))
        let start = Date(timeIntervalSince1970: 1_000_000)
        var attempts = 0
        var since: Date?
        var waits: [String] = []
        for elapsed in [0.0, 30, 90] {
            let (decision, began) = RetryDecision.keepTrying(
                after: Self.reset,
                policy: policy,
                now: start.addingTimeInterval(elapsed),
                streakSince: since,
                attempts: attempts,
                progressed: false,
                random: 0
            )
            waits += Self.waits([decision])
            since = began
            attempts += 1
        }
        #expect(waits == ["1: 30.0 seconds", "2: 60.0 seconds", "3: 120.0 seconds"])
        #expect(since == start)
        let late = RetryDecision.keepTrying(
            after: Self.reset,
            policy: policy,
            now: start.addingTimeInterval(600),
            streakSince: since,
            attempts: attempts,
            progressed: false
        )
        #expect(Self.waits([late.decision]) == ["gave up: \(Self.reset.hint ?? "")"])
        let moved = RetryDecision.keepTrying(
            after: Self.reset,
            policy: policy,
            now: start.addingTimeInterval(600),
            streakSince: since,
            attempts: attempts,
            progressed: true,
            random: 0
        )
        #expect(Self.waits([moved.decision]) == ["1: 30.0 seconds"] && moved.since == start.addingTimeInterval(600))
    }

    @Test(
        "starting over: the same file whole is written from 0 while retries last; a changed file restarts three times, then gives up saying so"
    )
    func startingOver() {
        let url = URL(string: "http://h.test/f")!
        var budget = RetryBudget(maxRetries: 2, maxRestarts: 3, committed: 0)
        let whole = (0..<3).map { _ in
            StartOverDecision.after(
                Restart(reason: "200"),
                wholeSameFile: true,
                committed: 0,
                budget: &budget,
                url: url
            )
        }
        #expect(
            whole.map(Self.name) == [
                "writeWhole", "writeWhole", "giveUp: The server kept breaking off http://h.test/f",
            ]
        )
        guard case .giveUp(let brokeOff) = whole[2] else { return }
        #expect(brokeOff.hint == "Gave up after 2 retries (the server ignores ranges, so each starts from 0)")
        let changed = (0..<4).map { _ in
            StartOverDecision.after(
                Restart(reason: "its ETag changed"),
                wholeSameFile: false,
                committed: 0,
                budget: &budget,
                url: url
            )
        }
        #expect(
            changed.map(Self.name) == [
                "restart", "restart", "restart",
                "giveUp: The file at http://h.test/f kept changing during the download (its ETag changed)",
            ]
        )
    }

    static func name(_ decision: StartOverDecision) -> String {
        switch decision {
        case .writeWhole: "writeWhole"
        case .restart: "restart"
        case .giveUp(let error): "giveUp: \(error.message)"
        }
    }
}
