import Foundation

/// What a run does after an attempt ends: the planner of ``Transfer``'s loop, pure.
///
/// It reads how the attempt ended (``AttemptOutcome``) with what the run knows of its file
/// and sources, counts the failure against the run's ``RetryBudget``, and says the next
/// step; the transfer performs it. Whether a source gives way is asked of the run's
/// sources (`leadGivesWay`, `changedLeadGivesWay`), which drop it when it does.
enum NextStep {
    /// The attempt did what it set out to do: on to the completion.
    case finish
    /// A stop was requested: the run concludes by its reason.
    case stop
    /// Nothing more to try: the error to report, saying why.
    case giveUp(any Error)
    /// The lead gave way to the next source: try again at once from what is written.
    case nextSource
    /// Start the file over from byte 0, writing the restart's response first when it
    /// brought one. `rangesDeclined`: the server sent the same file whole instead of a range,
    /// so the run stops splitting (a retry, counted as one); otherwise the file changed (a
    /// restart, a bounded number of times).
    case startOver(Restart, rangesDeclined: Bool)
    /// Try again from what is written after `after`, try `attempt` of the streak.
    case retry(HaulError, after: Duration, attempt: Int)

    /// What the run knows when an attempt ends.
    struct Facts {
        var url: URL
        /// Bytes durably written.
        var committed: Int64
        /// Mirrors found to hold the same bytes as the lead.
        var verifiedSources: Int
        /// Whether the URL's server has no usable route now (the manager waits for the network).
        /// Asked only after a failure that may pass: each look is a socket and an interface
        /// listing, which a download that succeeded must not pay for.
        var offline: () -> Bool
        /// The range rules over the version of the file the run holds.
        var rules: TransferRules
    }

    /// The step after an attempt that ended with `outcome`.
    static func after(
        _ outcome: AttemptOutcome,
        facts: Facts,
        budget: inout RetryBudget,
        policy: RetryPolicy,
        leadGivesWay: (_ error: any Error, _ retryable: Bool) -> Bool,
        changedLeadGivesWay: (_ reason: String) -> Bool,
        random: Double = Double.random(in: 0...1)
    ) -> NextStep {
        switch outcome {
        case .done, .stepAside:
            return .finish
        case .stopped:
            return .stop
        case let .failed(error):
            // A lead that cannot serve the file gives way to the next source.
            return leadGivesWay(error, false) ? .nextSource : .giveUp(error)
        case let .restart(restart)
        where restart.response == nil && !restart.keepsLead && facts.committed > 0 && facts.verifiedSources > 1:
            // The lead's copy changed, and verified mirrors hold the bytes written: they
            // continue the file.
            return changedLeadGivesWay(restart.reason) ? .nextSource : .giveUp(restart)
        case let .restart(restart):
            let whole = restart.response.map { facts.rules.isSameFile(status: $0.status, headers: $0.headers) } ?? false
            switch StartOverDecision.after(
                restart,
                wholeSameFile: whole,
                committed: facts.committed,
                budget: &budget,
                url: facts.url
            ) {
            case let .giveUp(error): return .giveUp(error)
            case .writeWhole: return .startOver(restart, rangesDeclined: true)
            case .restart: return .startOver(restart, rangesDeclined: false)
            }
        case let .retry(error):
            if facts.offline() { return .giveUp(error) }  // The manager waits for the network.
            if leadGivesWay(error, true) { return .nextSource }
            switch RetryDecision.transfer(
                after: error,
                committed: facts.committed,
                budget: &budget,
                policy: policy,
                random: random
            ) {
            case let .giveUp(failure): return .giveUp(failure)
            case let .retry(delay, attempt): return .retry(error, after: delay, attempt: attempt)
            }
        }
    }
}
