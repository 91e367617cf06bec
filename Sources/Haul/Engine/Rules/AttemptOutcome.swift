/// A reason to throw away the partial data and start again from byte 0. When the sign of
/// the change was a 200 (the whole new representation), it comes along, so the restart
/// writes that body from byte 0 without asking again (rule 5).
struct Restart: Error, Sendable {
    var reason: String
    var response: HTTPTransport.Response?
    /// The failure that led to the request this restart answered, when there was one.
    var after: HaulError?
    /// A mirror was found to have written other bytes than the URL's (and is dropped): the
    /// file starts over from its sources as they are, the URL kept.
    var keepsLead = false

    init(reason: String, response: HTTPTransport.Response? = nil, after: HaulError? = nil) {
        self.reason = reason
        self.response = response
        self.after = after
    }
}

/// How an attempt ended — one connection's on its segment, or the transfer's whole pass —
/// and so what comes next.
///
/// Every error an attempt throws is read here, once, in one order of precedence: a stop the
/// user or the scheduler asked for wins over whatever the stop caused; then another version
/// of the file; then failures worth retrying; everything else is final. The connections and
/// the transfer switch over the result instead of catching error types in an order that
/// matters.
enum AttemptOutcome: Sendable {
    /// The attempt did what it set out to do.
    case done
    /// Another version of the file, or an answer no resume can continue: start from 0.
    case restart(Restart)
    /// A failure with a chance of success: try again from what is written, after a backoff.
    case retry(HaulError)
    /// The connection let its segment go, so the others finish it (connections only).
    case stepAside
    /// A stop was requested (pause, yield or cancel); the transfer concludes by its reason.
    case stopped
    /// A failure no retry mends.
    case failed(any Error)

    /// Reads what an attempt threw.
    init(_ error: any Error, stopRequested: Bool) {
        if stopRequested {
            self = .stopped
        } else if let restart = error as? Restart {
            self = .restart(restart)
        } else if let error = error as? HaulError, error.isRetryable {
            self = .retry(error)
        } else {
            self = .failed(error)
        }
    }

    /// The error to hand up when this attempt's caller cannot act on it here; nil for
    /// `done` and `stepAside`, which are not failures.
    var error: (any Error)? {
        switch self {
        case .done, .stepAside: nil
        case let .restart(restart): restart
        case let .retry(error): error
        case .stopped: CancellationError()
        case let .failed(error): error
        }
    }
}
