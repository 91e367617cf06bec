import Foundation
import Logging

/// How failures with a chance of success are retried: exponential backoff with full
/// jitter, honouring the server's `Retry-After`, a bounded number of times.
public struct RetryPolicy: Sendable, Equatable {
    /// Retries allowed in a row without progress. An attempt that moved the download forward
    /// resets the count, so a long download over a flaky network is not given up on.
    public var maxRetries: Int
    /// The first delay; each further retry doubles it.
    public var baseDelay: Duration
    /// The longest delay backoff may reach.
    public var maxDelay: Duration
    /// The longest `Retry-After` Haul will wait out; a server asking for longer fails the
    /// download at once, saying what it asked, instead of leaving it silent for hours.
    public var maxRetryAfter: Duration

    public init(
        maxRetries: Int = 5,
        baseDelay: Duration = .milliseconds(500),
        maxDelay: Duration = .seconds(30),
        maxRetryAfter: Duration = .seconds(600)
    ) {
        self.maxRetries = maxRetries
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.maxRetryAfter = maxRetryAfter
    }

    /// The delay before retry number `attempt` (1-based).
    func delay(attempt: Int, retryAfter: Duration?, random: Double = Double.random(in: 0...1)) -> Duration {
        if let retryAfter { return min(retryAfter, maxRetryAfter) }
        let exponent = min(max(attempt - 1, 0), 30)
        let ceiling = min(maxDelay, baseDelay * (1 << exponent))
        // Full jitter, but never less than half the step, so retries do not hammer a server.
        return ceiling * (0.5 + 0.5 * random)
    }

    /// The wait before retry number `attempt` (1-based) after `error`: the server's
    /// `Retry-After` when it sent one, else the backoff.
    /// - Throws: `error`, saying so, when the server asked for a longer wait than ``maxRetryAfter``.
    func delay(retrying error: HaulError, attempt: Int) throws -> Duration {
        if let refusal = refusal(retrying: error) { throw refusal }
        return delay(attempt: attempt, retryAfter: error.retryAfter)
    }

    /// `error`, final and saying why, when the server asked to wait longer than
    /// ``maxRetryAfter`` before trying again (`Retry-After`); nil when a retry may wait.
    func refusal(retrying error: HaulError) -> HaulError? {
        guard let asked = error.retryAfter, asked > maxRetryAfter else { return nil }
        var failure = error
        failure.message +=
            "; the server asked to wait \(asked.spoken) before trying again (Retry-After), longer than the \(maxRetryAfter.spoken) Haul waits"
        failure.hint = "Try again later, or allow longer waits with --retry-max-wait"
        failure.isFinal = true
        return failure
    }

    func givenUp(_ error: HaulError) -> HaulError {
        // Said once: a connection's retries and then its download's may both end here.
        if error.hint?.hasPrefix("Gave up after") == true { return error }
        var error = error
        var hint = "Gave up after \(maxRetries) \(maxRetries == 1 ? "retry" : "retries")"
        if let advice = error.hint, !advice.isEmpty { hint += "; " + advice.continuingSentence }
        error.hint = hint + "; " + HaulError.rerunToResume
        return error
    }

    /// Runs `attempt` until it returns, retrying the retryable ``HaulError``s it throws after
    /// the backoff (shown in `progress`, and given to `announce` once it is), at most
    /// ``maxRetries`` times in a row: for a request whose answer is awaited before anything
    /// is kept (a stream's opening, a check for a newer version).
    /// - Parameter offline: true when the server has no usable route: the error goes up at
    ///   once, for a manager that waits for the network.
    func retrying<Result>(
        progress: ProgressBox,
        logger: Logger,
        timeline: Timeline,
        offline: () -> Bool = { false },
        announce: (DownloadProgress) -> Void = { _ in },
        _ attempt: () async throws -> Result
    ) async throws -> Result {
        // Failures in a row: nothing here is progress (each try starts from the same point).
        var budget = RetryBudget(maxRetries: maxRetries, maxRestarts: 0, committed: 0)
        while true {
            do {
                return try await attempt()
            } catch let error as HaulError where error.isRetryable {
                if offline() { throw error }
                switch RetryDecision.transfer(after: error, committed: 0, budget: &budget, policy: self) {
                case .giveUp(let failure):
                    throw failure
                case .retry(let delay, let attempt):
                    try await wait(
                        delay,
                        attempt: attempt,
                        after: error,
                        progress: progress,
                        logger: logger,
                        timeline: timeline,
                        announce: announce
                    )
                }
            }
        }
    }

    /// Waits out `delay` before retry `attempt` after `error`, saying so in the log and in
    /// the progress (which shows the wait and the tries left).
    func wait(
        _ delay: Duration,
        attempt: Int,
        after error: HaulError,
        progress: ProgressBox,
        logger: Logger,
        timeline: Timeline,
        saying message: Logger.Message = "retrying",
        _ metadata: Logger.Metadata = [:],
        announce: (DownloadProgress) -> Void = { _ in }
    ) async throws {
        logger.notice(
            message,
            metadata: metadata.merging(
                ["attempt": "\(attempt)", "delay": "\(delay)", "error": "\(error.message)"],
                uniquingKeysWith: { $1 }
            )
        )
        try await progress.waiting(
            delay,
            after: error,
            attempt: attempt,
            of: maxRetries,
            on: timeline,
            announce: announce
        )
    }

    /// Whether an HTTP status says "not now" rather than "no": 408, 429 and 5xx.
    static func isTransient(status: Int) -> Bool {
        status == 408 || status == 429 || (500...599).contains(status)
    }

    /// Parses `Retry-After`: delay-seconds or an HTTP date.
    static func parseRetryAfter(_ value: String?, now: Date = Date()) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if value.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) {
            // Any number of digits: one too long for Int64 is still "a very long time".
            return .seconds(Int64(value) ?? Int64.max / 1_000_000_000_000)
        }
        if let date = HTTPDate.parse(value) {
            return .milliseconds(Int64(max(0, date.timeIntervalSince(now)) * 1000))
        }
        return nil
    }
}

extension Duration {
    /// A rounded, readable length of time: "45 s", "12 min", "3 h", "11574 days".
    var spoken: String {
        let seconds = components.seconds
        switch seconds {
        case ..<120: return "\(max(seconds, 0)) s"
        case ..<7200: return "\(seconds / 60) min"
        case ..<172_800: return "\(seconds / 3600) h"
        default: return "\(seconds / 86400) days"
        }
    }
}
