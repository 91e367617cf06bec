import Foundation
import Logging

/// A download with mirrors, seen from the transfer: which source opens each attempt (the
/// lead, ``SourcePool/lead``), and what happens when the lead itself fails.
extension Transfer {
    /// Where an attempt's first request goes: the lead's URL.
    var openingURL: URL {
        guard let sources, let lead = sources.lead else { return task.url }
        return sources.source(lead).url
    }

    /// Follows a change of lead before an attempt: the lead that was is dropped, and the
    /// first source left opens the download from now on. Its validators become the file's
    /// when it was verified against the bytes written; a source never compared with them
    /// starts the file over.
    func followLead() async throws {
        guard let sources, let lead = sources.lead, lead != leadIndex else { return }
        leadIndex = lead
        let source = sources.source(lead)
        logger.notice(
            "the download continues from the next source",
            metadata: ["source": "\(Redaction.url(source.url))"]
        )
        if source.verified, var validators = source.validators {
            validators.totalLength = task.totalLength
            task.validators = validators
            sources.lead(lead)
            task.sources = sources.snapshot
            try await store.saveResponse(task, segments: segments)
        } else {
            sources.lead(lead)
            try await resetToZero(validators: Validators())
        }
    }

    /// Whether the lead's failure at an attempt's opening drops it, the next source taking
    /// over: a failure no retry mends, or, for one worth retrying, more than two in a row
    /// (the mirrors are not kept waiting through the whole backoff). False without
    /// another source.
    func dropLead(after error: any Error, retryable: Bool) -> Bool {
        guard let sources, let lead = sources.lead, sources.hasAlternative(to: lead) else { return false }
        let reason: String
        if retryable {
            guard let error = error as? HaulError else { return false }
            let failures = sources.failed(lead)
            guard failures > min(environment.retry.maxRetries, 2) else { return false }
            reason = "\(error.message) (after \(failures) tries)"
        } else {
            guard let error = error as? HaulError, error.code.isSourceFault else { return false }
            reason = error.message
        }
        guard sources.drop(lead, reason: reason) else { return false }
        logger.warning(
            "source dropped for this download; the others continue",
            metadata: ["source": "\(Redaction.url(sources.source(lead).url))", "reason": "\(Redaction.text(reason))"]
        )
        return true
    }
}
