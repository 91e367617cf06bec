import Foundation

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
    /// The longest `Retry-After` Haul will honour; longer requests fail instead of hanging.
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

    /// Parses `Retry-After`: delay-seconds or an HTTP date.
    static func parseRetryAfter(_ value: String?, now: Date = Date()) -> Duration? {
        guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
        if let seconds = Int64(value), seconds >= 0 { return .seconds(seconds) }
        if let date = HTTPDate.parse(value) {
            return .milliseconds(Int64(max(0, date.timeIntervalSince(now)) * 1000))
        }
        return nil
    }
}
