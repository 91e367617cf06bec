import Foundation
import NIOHTTP1

/// The range rules of docs/architecture.md as a value: which request opens an attempt, and
/// what every answer means. It does no I/O and keeps no clock; ``Transfer`` and
/// ``SegmentWorker`` do the requests, the writes and the store, and ask it what to do.
///
/// Each rule is a named case of ``Opening``, ``FirstAnswer`` or ``SegmentAnswer``, tested on
/// its own in TransferRulesTests and end to end in RangeCorrectnessTests and IntegrityTests.
struct TransferRules: Sendable, Equatable {
    /// What the first response of the current version said: its validators and its length.
    var representation: Validators

    init(_ representation: Validators) {
        self.representation = representation
    }

    /// The file's full length, when known.
    var totalLength: Int64? { representation.totalLength }

    /// The value sent in `If-Range` on every ranged request, when the file has a strong validator.
    var ifRange: String? { representation.ifRangeValue }

    /// Whether the download may ask for ranges of its own (split, steal, resume a segment):
    /// only with a validator `If-Range` can send and a known length (rule 3).
    var allowsRanges: Bool { ifRange != nil && totalLength != nil }

    /// Bytes re-read and compared before every resume point (rule 7). Without a validator
    /// they are the only check; with one they still catch validators that do not change
    /// when the bytes do — nginx's ETag is the mtime in whole seconds and the size, so a
    /// same-size file rewritten within the same second keeps it, and `If-Range` alone
    /// would append the new version's tail to the old head.
    static let overlapLength: Int64 = 64 * 1024

    /// How many bytes before `from` a ranged request inside a segment that starts at
    /// `segmentStart` asks for again, to compare them with the disk (rule 7): up to
    /// ``overlapLength``, none at the segment's start — and none when piece hashes check every
    /// byte (rule 7a): then each piece is verified whole, and the bytes before the resume point
    /// may be another source's, being fetched again.
    static func overlap(segmentStart: Int64, from: Int64, piecesChecked: Bool) -> Int64 {
        piecesChecked ? 0 : min(from - segmentStart, overlapLength)
    }

    // MARK: Opening an attempt

    /// How an attempt begins.
    enum Opening: Equatable, Sendable {
        /// Ask for the whole file, no range.
        case whole
        /// Forget what is written (keeping the validators), then ask for the whole file.
        /// `reason` is logged when there is one; a start over that merely costs less than a
        /// check has none.
        case startOver(reason: String?)
        /// `Range: bytes=<offset - overlap>-`, with `If-Range` when there is a validator;
        /// the `overlap` bytes before `offset` are compared, not written (rule 7).
        case resume(offset: Int64, overlap: Int64, ifRange: String?)
        /// The download is already split: each connection asks for its own segment's range.
        case segments

        /// The `Range` header value this opening sends, if any.
        var range: String? {
            guard case let .resume(offset, overlap, _) = self else { return nil }
            return "bytes=\(offset - overlap)-"
        }

        /// The `If-Range` value this opening sends, if any.
        var ifRange: String? {
            guard case let .resume(_, _, ifRange) = self else { return nil }
            return ifRange
        }

        /// Where the answer's body starts in the file, and how many of its first bytes are
        /// compared with the disk rather than written.
        var bodyStart: (offset: Int64, overlap: Int64) {
            guard case let .resume(offset, overlap, _) = self else { return (0, 0) }
            return (offset - overlap, overlap)
        }
    }

    /// Decides how an attempt opens (rules 3 and 7).
    ///
    /// - Parameters:
    ///   - segments: the task's segments as the store has them.
    ///   - partSize: the part file's size on disk.
    ///   - confirming: the committed offset is where a body of unknown length ended, and the
    ///     request asks whether anything follows (rule 8).
    ///   - piecesChecked: piece hashes check every byte of the file (rule 7a): a resume
    ///     compares no overlap.
    func opening(
        segments: [SegmentRecord],
        partSize: Int64,
        confirming: Bool,
        piecesChecked: Bool = false
    ) -> Opening {
        if segments.count > 1, allowsRanges {
            // Segments with nothing committed may start beyond the part file's end.
            let written = segments.filter { $0.committed > $0.start }.map(\.committed).max() ?? 0
            return partSize < written ? .startOver(reason: "part file shorter than its checkpoints") : .segments
        }
        let offset = segments.first?.committed ?? 0
        if offset > 0, partSize < offset { return .startOver(reason: "part file shorter than its checkpoint") }
        guard offset > 0 || confirming else { return .whole }
        // Confirming where a stream of unknown length ended has no piece hashes to lean on.
        let overlap = Self.overlap(segmentStart: 0, from: offset, piecesChecked: piecesChecked && !confirming)
        // No validator and little done: fetching it again is cheaper than checking it.
        if overlap == offset, ifRange == nil, !confirming { return .startOver(reason: nil) }
        return .resume(offset: offset, overlap: overlap, ifRange: ifRange)
    }

    // MARK: The first answer

    /// What the answer to an attempt's first request means.
    enum FirstAnswer: Equatable, Sendable {
        /// A 200: the whole representation, written from byte 0 on this very response (rule 5).
        case wholeFile(length: Int64?)
        /// A 206 checked against what was asked (rule 4): the body continues the file from the
        /// request's start up to `end` (one past its last byte). `learntLength` is the file's
        /// length when it was unknown until now.
        case continues(end: Int64, learntLength: Int64?)
        /// Nothing is left to fetch: the file ends at `length`. `unconfirmed` says why the
        /// server could not confirm it, when it could not.
        case complete(length: Int64, unconfirmed: String?)
        /// Another version, or an answer that cannot continue this one: start from 0.
        case restart(String)
        /// A status the rules do not continue from: the transport's failure for it.
        case failure
    }

    /// Classifies the answer to an attempt's first request, sent as `opening` decided (or
    /// a 200 a restart brought, with `opening` `.whole`).
    ///
    /// With `confirming`, a 416 with `*/offset`, a 206 that brings no new byte, or a 200
    /// whose `Content-Length` is the offset confirm the end; a 206 with more continues the
    /// file; when the server cannot say (no ranges and no length), the file ends there
    /// unconfirmed.
    func classify(status: Int, headers: HTTPHeaders, to opening: Opening, confirming: Bool) -> FirstAnswer {
        let requestStart = opening.bodyStart.offset
        let offset = requestStart + opening.bodyStart.overlap
        let ranged = opening.range != nil
        if confirming, status == 200, representation.contradiction(headers) == nil {
            let length = Self.contentLength(headers)
            if length == nil || length == offset {
                return .complete(length: offset, unconfirmed: length == offset ? nil : "the server ignores ranges")
            }
        }
        switch status {
        case 200:
            return .wholeFile(length: Self.contentLength(headers))
        case 206 where ranged:
            let (contentRange, last): (ContentRange, Int64)
            switch checkPartial(headers, requestStart: requestStart, requestLast: nil) {
            case let .failure(restart): return .restart(restart.reason)
            case let .success(checked): (contentRange, last) = checked
            }
            // A length never known is learnt from Content-Range, or confirmed by a 206 that
            // ends where the file did (its overlap is compared as it streams).
            var learnt: Int64?
            if totalLength == nil { learnt = contentRange.completeLength ?? (last + 1 == offset ? offset : nil) }
            return .continues(end: last + 1, learntLength: learnt)
        case 416 where ranged:
            if let change = representation.contradiction(headers) {
                return .restart("416 from another version of the file: \(change)")
            }
            let contentRange = headers.first(name: "Content-Range").flatMap(ContentRange.init(parsing:))
            // Rule 6: complete only when every byte of the stored length is committed and the
            // server names exactly that length; a file that shrank or grew starts over.
            if contentRange?.range == nil, let current = contentRange?.completeLength, current == offset,
                totalLength == nil || totalLength == current
            {
                return .complete(length: offset, unconfirmed: nil)
            }
            if confirming, contentRange == nil {
                return .complete(length: offset, unconfirmed: "its 416 names no length")
            }
            let said = contentRange?.completeLength.map { "\($0) bytes" } ?? "no length"
            return .restart("416 for bytes from \(requestStart) (the server says \(said), \(offset) were committed)")
        default:
            if confirming, !RetryPolicy.isTransient(status: status) {
                return .complete(length: offset, unconfirmed: "it answered HTTP \(status)")
            }
            return .failure
        }
    }

    /// Whether a 200 to a range request shows the same file (validators and length agree),
    /// so the server merely ignored the range: a retry from 0, not a new version.
    func isSameFile(status: Int, headers: HTTPHeaders) -> Bool {
        guard status == 200, let totalLength, Self.contentLength(headers) == totalLength else { return false }
        return representation.contradiction(headers) == nil
    }

    /// Whether an attempt that opened with `answer` may split the file over several
    /// connections: a validator, a length, and a server that serves ranges.
    func maySplit(status: Int, headers: HTTPHeaders) -> Bool {
        allowsRanges && (status == 206 || headers.first(name: "Accept-Ranges") == "bytes")
    }

    // MARK: A segment's answer

    /// What the answer to one connection's ranged request for its segment means.
    enum SegmentAnswer: Equatable, Sendable {
        /// A 206 checked against what was asked (rule 4), whose body ends at `end` (one past
        /// its last byte).
        case continues(end: Int64)
        /// Another version or an inconsistent server: start from 0. `carriesWholeFile` when
        /// the answer is a 200, whose body is then written from byte 0 (rule 5).
        case restart(String, carriesWholeFile: Bool)
        /// A status the rules do not continue from: the transport's failure for it.
        case failure
    }

    /// Classifies the answer to `bytes=requestStart-requestLast` (`requestLast` nil for the
    /// file's last segment, asked open-ended).
    func classifySegment(
        status: Int,
        headers: HTTPHeaders,
        requestStart: Int64,
        requestLast: Int64?
    )
        -> SegmentAnswer
    {
        switch status {
        case 206:
            switch checkPartial(headers, requestStart: requestStart, requestLast: requestLast) {
            case let .success((_, last)): return .continues(end: last + 1)
            case let .failure(restart): return .restart(restart.reason, carriesWholeFile: false)
            }
        case 200:
            // The validator no longer holds, or the server stopped honouring ranges: either
            // way this is the whole file, and the download starts over with it.
            return .restart("200 to a range request with If-Range", carriesWholeFile: true)
        case 416:
            return .restart("416 for a range inside the file (the file shrank or changed)", carriesWholeFile: false)
        default:
            return .failure
        }
    }

    // MARK: Rule 4

    /// Checks a 206 against what was asked and what is known (rule 4). Returns its
    /// Content-Range and the last byte it carries.
    func checkPartial(
        _ headers: HTTPHeaders,
        requestStart: Int64,
        requestLast: Int64?
    ) -> Result<
        (ContentRange, last: Int64), Restart
    > {
        guard let header = headers.first(name: "Content-Range"), let contentRange = ContentRange(parsing: header),
            let range = contentRange.range
        else {
            return .failure(Restart(reason: "206 with a missing or malformed Content-Range"))
        }
        guard range.lowerBound == requestStart else {
            return .failure(Restart(reason: "206 starts at \(range.lowerBound), asked for \(requestStart)"))
        }
        if let requestLast, range.upperBound > requestLast {
            return .failure(Restart(reason: "206 ends at \(range.upperBound), asked for at most \(requestLast)"))
        }
        if let totalLength, contentRange.completeLength != totalLength {
            let said = contentRange.completeLength.map(String.init) ?? "*"
            return .failure(Restart(reason: "206 says the file is \(said) bytes, was \(totalLength)"))
        }
        if let length = headers.first(name: "Content-Length").flatMap({ Int64($0) }), length != contentRange.length {
            return .failure(Restart(reason: "206 Content-Length \(length) disagrees with Content-Range \(header)"))
        }
        if let change = representation.contradiction(headers) {
            return .failure(Restart(reason: "206 shows another version of the file: \(change)"))
        }
        return .success((contentRange, range.upperBound))
    }

    // MARK: -N: the file already there

    /// Whether the answer to `-N`'s conditional GET shows that the file at the destination
    /// (`size` bytes, modified at `modified`) is the server's current version: a 304; or a 200
    /// from a server that ignores conditions, when — for a file this task downloaded, whose
    /// validators were `recorded` — its validators and length agree, or — for a file Haul did
    /// not download (`recorded` nil) — it is no newer and of the same length.
    static func isUpToDate(
        status: Int,
        headers: HTTPHeaders,
        recorded: Validators?,
        size: Int64,
        modified: Date
    ) -> Bool {
        if status == 304 { return true }
        let length = headers.first(name: "Content-Length").flatMap { Int64($0) }
        guard length == size else { return false }
        if let recorded {
            let current = Validators(headers: headers, totalLength: length)
            return recorded.contradiction(headers) == nil
                && (recorded.etag.map { $0 == current.etag } ?? (recorded.lastModified != nil))
        }
        let served = headers.first(name: "Last-Modified").flatMap(HTTPDate.parse)
        return served.map { $0 <= modified.addingTimeInterval(0.999) } == true
    }

    /// The body length a response declares, when it declares one it is bound to (no
    /// transfer coding).
    static func contentLength(_ headers: HTTPHeaders) -> Int64? {
        guard headers.first(name: "Transfer-Encoding") == nil, let text = headers.first(name: "Content-Length"),
            let value = Int64(text.trimmingWhitespace()), value >= 0
        else { return nil }
        return value
    }
}
