import Foundation
import Logging

/// A download with mirrors, as its transfer chooses among them: which source opens each
/// attempt (the lead, ``SourcePool/lead``), how many connections the sources take, and
/// which failures of the lead give its place to the next source. The pool itself is shared
/// with the connections (``SegmentWorker``) and the checkpoints; the selector decides, the
/// transfer records what it decided.
final class SourceSelector {
    /// Connections to one source when the request does not say (aria2's default is 1; a
    /// mirror is usually a server of its own, able to serve a few).
    static let defaultConnectionsPerServer = 4

    let pool: SourcePool
    /// The source whose validators are the task's.
    private(set) var leadIndex: Int
    private let logger: Logger

    /// The selector of `task`'s sources; nil for a download without mirrors.
    init?(_ task: TaskRecord, logger: Logger) {
        guard task.sources.count > 1 else { return nil }
        pool = SourcePool(
            task.sources,
            perSourceCap: task.maxConnectionsPerServer ?? SourceSelector.defaultConnectionsPerServer
        )
        leadIndex = pool.lead ?? 0
        self.logger = logger
    }

    /// Where an attempt's first request goes: the lead's URL.
    var openingURL: URL? { pool.lead.map { pool.source($0).url } }

    /// Connections for the download: every source gets one unless `wanted` says fewer; each
    /// source at most its cap.
    func connections(wanted: Int?, otherwise standard: Int) -> Int {
        let active = pool.activeCount
        let wanted = wanted ?? max(standard, active)
        return max(1, min(wanted, active * pool.perSourceCap, DownloadRequest.maxConnections))
    }

    /// How the file continues after the lead changed.
    enum LeadChange {
        /// The new lead was verified against the bytes written: its validators are the file's.
        case verified(Validators)
        /// The new lead was never compared with them: the file starts over.
        case unverified
    }

    /// Follows a change of lead before an attempt (the lead that was is dropped): the first
    /// source left opens the download from now on. Nil when the lead is the same.
    func followLead() -> LeadChange? {
        guard let lead = pool.lead, lead != leadIndex else { return nil }
        leadIndex = lead
        let source = pool.source(lead)
        logger.notice(
            "the download continues from the next source",
            metadata: ["source": "\(Redaction.url(source.url))"]
        )
        pool.lead(lead)
        if source.verified, let validators = source.validators { return .verified(validators) }
        return .unverified
    }

    /// Whether the lead's failure at an attempt's opening drops it, the next source taking
    /// over: a failure no retry mends, or, for one worth retrying, more than two in a row
    /// (the mirrors are not kept waiting through the whole backoff). False without
    /// another source.
    func dropLead(after error: any Error, retryable: Bool, maxRetries: Int) -> Bool {
        guard let lead = pool.lead, pool.hasAlternative(to: lead), let error = error as? HaulError else { return false }
        let reason: String
        if retryable {
            let failures = pool.failed(lead)
            guard failures > min(maxRetries, 2) else { return false }
            reason = "\(error.message) (after \(failures) tries)"
        } else {
            guard error.code.isSourceFault else { return false }
            reason = error.message
        }
        return drop(lead, reason: reason)
    }

    /// Drops the lead whose copy changed, when verified mirrors hold the bytes written (they
    /// continue the file); false when it cannot be dropped.
    func dropChangedLead(reason: String) -> Bool {
        guard pool.verifiedCount > 1, let lead = pool.lead else { return false }
        return drop(lead, reason: reason)
    }

    private func drop(_ index: Int, reason: String) -> Bool {
        guard pool.drop(index, reason: reason) else { return false }
        logger.warning(
            "source dropped for this download; the others continue",
            metadata: ["source": "\(Redaction.url(pool.source(index).url))", "reason": "\(Redaction.text(reason))"]
        )
        return true
    }
}
