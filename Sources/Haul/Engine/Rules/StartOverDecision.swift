import Foundation

/// What a run does when an attempt's answer means the file starts over from byte 0: a
/// plain value decided from the answer and the run's budget (docs/architecture.md, "Two
/// levels of retry").
enum StartOverDecision: Sendable {
    /// The server answered a range with its whole file, the same version (rule 5 without a
    /// change): write it from byte 0 on one connection — a retry, counted as one.
    case writeWhole
    /// The file changed: start it over, a bounded number of times.
    case restart
    /// Stop: the failure, saying why.
    case giveUp(HaulError)

    /// The decision after `restart`, for the download of `url`: `wholeSameFile` when the
    /// restart's answer is the whole of the same version of the file (its validators match).
    static func after(
        _ restart: Restart,
        wholeSameFile: Bool,
        committed: Int64,
        budget: inout RetryBudget,
        url: URL
    ) -> StartOverDecision {
        if wholeSameFile {
            guard budget.failed(committed: committed) != nil else {
                var error = restart.after ?? HaulError(.connection, "The server kept breaking off \(url)", url: url)
                error.hint =
                    "Gave up after \(budget.maxRetries) retries (the server ignores ranges, so each starts from 0)"
                return .giveUp(error)
            }
            return .writeWhole
        }
        guard budget.restarted() else {
            return .giveUp(
                HaulError(
                    .representationChanged,
                    "The file at \(url) kept changing during the download (\(restart.reason))",
                    url: url,
                    hint: "Try again later"
                )
            )
        }
        return .restart
    }
}
