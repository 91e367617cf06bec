import Foundation

/// What a download does after a failure that may pass: try again after a wait, or give up
/// saying why. A plain value decided from the policy and the tries so far — no clock, no
/// I/O (docs/architecture.md, "Two levels of retry").
///
/// Two kinds of task-level retry decide with it:
/// - a run's own retries (``RetryPolicy``, ``transfer(after:committed:budget:policy:random:)``):
///   a bounded number in a row without progress, each after a backoff or the server's
///   `Retry-After`; `-N`, `--continue` and `-o -` decide with the same function;
/// - once those are spent, a manager that keeps trying (``KeepTrying``,
///   ``keepTrying(after:policy:now:streakSince:attempts:progressed:random:)``): a backoff in
///   minutes, until a streak without progress has lasted ``KeepTrying/giveUpAfter``.
///
/// A connection's own choices (retry its range, step aside, drop its source) are
/// ``SegmentWorker``'s; waiting for the network is the manager's state, not a retry.
enum RetryDecision: Sendable {
    /// Try again after `after`: try number `attempt` of the current streak.
    case retry(after: Duration, attempt: Int)
    /// Stop trying: the failure, saying why.
    case giveUp(HaulError)

    /// A run's decision after `error`, with `committed` bytes on disk: the budget counts the
    /// failure (bytes beyond the furthest offset reached start a new streak, unless the
    /// connection was too slow to keep: a trickle is no progress). The wait doubles from the
    /// policy's base with jitter, or is the server's `Retry-After` — given up on when that is
    /// longer than the policy waits.
    static func transfer(
        after error: HaulError,
        committed: Int64,
        budget: inout RetryBudget,
        policy: RetryPolicy,
        random: Double = Double.random(in: 0...1)
    ) -> RetryDecision {
        guard let attempt = budget.failed(committed: committed, countsAsProgress: !SpeedFloor.isTooSlow(error)) else {
            return .giveUp(policy.givenUp(error))
        }
        if let refusal = policy.refusal(retrying: error) { return .giveUp(refusal) }
        return .retry(
            after: policy.delay(attempt: attempt, retryAfter: error.retryAfter, random: random),
            attempt: attempt
        )
    }

    /// A manager's decision after a run failed with `error`, its own retries spent:
    /// `progressed` (the run moved the download forward) starts a new streak at `now`;
    /// otherwise the streak began at `streakSince` and has had `attempts` tries. It gives up
    /// once the streak has lasted ``KeepTrying/giveUpAfter``.
    /// - Returns: the decision, and when the streak began (to be recorded with it).
    static func keepTrying(
        after error: HaulError,
        policy: KeepTrying,
        now: Date,
        streakSince: Date?,
        attempts: Int,
        progressed: Bool,
        random: Double = Double.random(in: 0...1)
    ) -> (decision: RetryDecision, since: Date) {
        let since = progressed ? now : (streakSince ?? now)
        let attempt = progressed ? 1 : attempts + 1
        guard now.timeIntervalSince(since) < policy.giveUpAfter.seconds else { return (.giveUp(error), since) }
        return (.retry(after: policy.delay(attempt: attempt, random: random), attempt: attempt), since)
    }
}
