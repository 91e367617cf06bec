import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// A reason to throw away the partial data and start again from byte 0. When the sign of
/// the change was a 200 (the whole new representation), it comes along, so the restart
/// writes that body from byte 0 without asking again (rule 5).
struct Restart: Error, Sendable {
    var reason: String
    var response: HTTPTransport.Response?
    /// The failure that led to the request this restart answered, when there was one.
    var after: HaulError?

    init(reason: String, response: HTTPTransport.Response? = nil) {
        self.reason = reason
        self.response = response
    }
}

/// A response already received for a segment, with what the transfer checked about it.
struct SegmentResponse: Sendable {
    var response: HTTPTransport.Response
    /// The segment it feeds (identified by its start).
    var segmentStart: Int64
    /// Where the body's first byte belongs in the file.
    var bodyOffset: Int64
    /// The bytes just before the resume point the body must repeat (rule 7), when the
    /// server gave no validator; they are compared, not written.
    var overlap: [UInt8]
    /// Where the response says its body ends, when it says.
    var expectedEnd: Int64?
}

/// One connection of a download: fetches segments and writes them into the part file.
///
/// Loops: claim a segment of the ``SegmentPlan`` (or steal half of one), ask for exactly
/// its range with `If-Range`, check the 206 against what was asked and what is known of the
/// file (rule 4), stream it to disk through a ``WriteBatch``, stop at the segment's end
/// (which another connection may have moved down). Any sign of a different representation
/// throws ``Restart`` and the whole download starts again; a broken connection is retried
/// with backoff from what is written, or left to the other connections.
struct SegmentWorker: Sendable {
    var plan: SegmentPlan
    var part: PartFile
    var transport: HTTPTransport
    var url: URL
    var headers: [HTTPHeaderField]
    /// `If-Range` for every ranged request: segmented downloads only happen with a validator.
    var ifRange: String?
    /// The validators of the representation being fetched; any response contradicting them
    /// is another version.
    var validators: Validators
    var totalLength: Int64?
    var limiters: [RateLimiter]
    var progress: ProgressBox
    var control: TransferControl
    var retry: RetryPolicy
    /// Received bytes wait in the batch at most this long before they are written, so a
    /// slow connection's bytes reach the next checkpoint too.
    var flushInterval: Duration
    var logger: Logger

    /// Works until there is nothing left to claim. `first`, when given, is streamed first.
    func run(first: SegmentResponse?) async throws {
        if let first {
            var failure: HaulError?
            do {
                try await stream(first)
            } catch let error as HaulError where error.isRetryable && canRequestRanges && control.requested == nil {
                // The open-ended first response broke; its segment continues with ranges.
                failure = error
            } catch {
                plan.release(segmentStart: first.segmentStart)
                throw error
            }
            // Without ranges the first response is the only stream: its failures go up to
            // the transfer, which applies the single-stream rules.
            guard canRequestRanges else {
                plan.release(segmentStart: first.segmentStart)
                return
            }
            guard try await work(segmentStart: first.segmentStart, after: failure) else { return }
        }
        guard canRequestRanges else { return }
        while let index = plan.claim() {
            guard try await work(segmentStart: plan.segment(index).start) else { return }
        }
    }

    /// Finishes an owned segment and lets it go. Returns false when the connection stepped
    /// aside and should stop.
    private func work(segmentStart start: Int64, after failure: HaulError? = nil) async throws -> Bool {
        do {
            try await fetch(segmentStart: start, after: failure)
        } catch is StepAside {
            return false
        } catch {
            plan.release(segmentStart: start)
            throw error
        }
        plan.release(segmentStart: start)
        return true
    }

    private var canRequestRanges: Bool { ifRange != nil && totalLength != nil }

    /// Fetches one claimed segment to its end, retrying broken connections with backoff.
    /// `failure`, when given, is how the previous response for it ended: it counts as the first.
    private func fetch(segmentStart start: Int64, after failure: HaulError? = nil) async throws {
        var failures = 0
        var pending = failure
        var lastFailure = failure
        while let segment = plan.segment(at: start), let end = segment.end, segment.written < end {
            let before = segment.written
            do {
                if let failure = pending {
                    pending = nil
                    throw failure
                }
                let response: SegmentResponse
                do {
                    response = try await request(segmentStart: start, from: segment.written, to: end)
                } catch var restart as Restart {
                    restart.after = lastFailure
                    throw restart
                }
                try await stream(response)
                return
            } catch let error as HaulError where error.isRetryable && control.requested == nil {
                lastFailure = error
                if (plan.segment(at: start)?.written ?? 0) > before { failures = 0 }
                failures += 1
                // With other connections still working, a failing one steps aside: its
                // segment goes back to be claimed (servers that cap connections per client
                // answer the extra ones with 503 or 429).
                if failures > 1 || error.status != nil, plan.stepAside(segmentStart: start) {
                    logger.debug("connection steps aside", metadata: ["error": "\(error.message)"])
                    throw StepAside()
                }
                guard failures <= retry.maxRetries else {
                    var error = error
                    error.hint = "Gave up after \(retry.maxRetries) retries; run the same command again to resume"
                    throw error
                }
                let delay = try retry.delay(retrying: error, attempt: failures)
                logger.notice(
                    "retrying segment",
                    metadata: ["start": "\(start)", "attempt": "\(failures)", "error": "\(error.message)"]
                )
                try await progress.waiting(delay, after: error)
            }
        }
    }

    /// A connection that let go of its segment, so another can finish it.
    struct StepAside: Error {}

    /// Asks for `from..<to` of the file: `bytes=from-(to-1)`, or `bytes=from-` for the
    /// file's last segment — starting up to 64 KiB earlier when the segment already holds
    /// bytes, which are compared with the disk before anything is written (rule 7).
    private func request(segmentStart start: Int64, from: Int64, to end: Int64) async throws -> SegmentResponse {
        let last = end == totalLength ? nil : end - 1
        let overlap = min(from - start, Transfer.overlapLength)
        let expected = overlap > 0 ? try part.read(at: from - overlap, count: Int(overlap)) : []
        guard expected.count == Int(overlap) else {
            throw Restart(reason: "the part file is shorter than the bytes written to it")
        }
        let requestStart = from - overlap
        let response = try await transport.get(
            url,
            headers: headers,
            range: "bytes=\(requestStart)-\(last.map(String.init) ?? "")",
            ifRange: ifRange,
            logger: logger
        )
        switch response.status {
        case 206:
            let contentRange = try SegmentWorker.checkPartial(
                response.headers,
                requestStart: requestStart,
                requestLast: last,
                totalLength: totalLength,
                validators: validators
            )
            return SegmentResponse(
                response: response,
                segmentStart: start,
                bodyOffset: requestStart,
                overlap: expected,
                expectedEnd: contentRange.range!.upperBound + 1
            )
        case 200:
            // The validator no longer holds, or the server stopped honouring ranges: either
            // way this is the whole file, and the download starts over with it.
            throw Restart(reason: "200 to a range request with If-Range", response: response)
        case 416:
            await HTTPTransport.discard(response.head.body)
            throw Restart(reason: "416 for a range inside the file (the file shrank or changed)")
        default:
            throw await HTTPTransport.failure(response, url: url)
        }
    }

    /// Checks a 206 against what was asked and what is known (rule 4). Returns its
    /// Content-Range, whose range is then known to be present.
    static func checkPartial(
        _ headers: HTTPHeaders,
        requestStart: Int64,
        requestLast: Int64?,
        totalLength: Int64?,
        validators: Validators
    ) throws -> ContentRange {
        guard let header = headers.first(name: "Content-Range"), let contentRange = ContentRange(parsing: header),
            let range = contentRange.range
        else {
            throw Restart(reason: "206 with a missing or malformed Content-Range")
        }
        guard range.lowerBound == requestStart else {
            throw Restart(reason: "206 starts at \(range.lowerBound), asked for \(requestStart)")
        }
        if let requestLast, range.upperBound > requestLast {
            throw Restart(reason: "206 ends at \(range.upperBound), asked for at most \(requestLast)")
        }
        if let total = totalLength, contentRange.completeLength != total {
            throw Restart(
                reason:
                    "206 says the file is \(contentRange.completeLength.map(String.init) ?? "*") bytes, was \(total)"
            )
        }
        if let length = headers.first(name: "Content-Length").flatMap({ Int64($0) }), length != contentRange.length {
            throw Restart(reason: "206 Content-Length \(length) disagrees with Content-Range \(header)")
        }
        if let change = validators.contradiction(headers) {
            throw Restart(reason: "206 shows another version of the file: \(change)")
        }
        return contentRange
    }

    /// Writes a response's body into its segment in batches, up to the segment's end.
    ///
    /// The first `overlap` bytes are compared with the disk, not written (rule 7). When
    /// another connection moved the end down, the rest of the response is abandoned; when
    /// the response should cover the segment exactly, it is read to its end so a body longer
    /// than promised is caught (rule 8).
    func stream(_ segment: SegmentResponse) async throws {
        let start = segment.segmentStart
        var position = segment.bodyOffset
        var overlap = segment.overlap
        var overlapChecked = 0
        var batch = WriteBatch(offset: position + Int64(overlap.count))
        var lastFlush = ContinuousClock.now
        do {
            for try await var buffer in segment.response.head.body {
                if overlapChecked < overlap.count, buffer.readableBytes > 0 {
                    let n = min(buffer.readableBytes, overlap.count - overlapChecked)
                    let matches = buffer.withUnsafeReadableBytes { received in
                        overlap.withUnsafeBytes { expected in
                            memcmp(received.baseAddress!, expected.baseAddress! + overlapChecked, n) == 0
                        }
                    }
                    guard matches else { throw Restart(reason: "the bytes before the resume point changed") }
                    overlapChecked += n
                    position += Int64(n)
                    buffer.moveReaderIndex(forwardBy: n)
                    if overlapChecked == overlap.count { overlap = [] }
                }
                let count = buffer.readableBytes
                guard count > 0 else { continue }
                if let expectedEnd = segment.expectedEnd, position + Int64(count) > expectedEnd {
                    throw HaulError(
                        .invalidResponse,
                        "The server sent more bytes than it promised (\(position + Int64(count)) > \(expectedEnd)) for \(url.absoluteString)",
                        url: url
                    )
                }
                let (allowed, complete) = plan.accept(count, segmentStart: start)
                if allowed > 0 {
                    if allowed < count { buffer.moveWriterIndex(to: buffer.readerIndex + allowed) }
                    for limiter in limiters { try await limiter.take(allowed) }
                    batch.append(buffer)
                    position += Int64(allowed)
                    progress.add(allowed)
                    if batch.isFull || ContinuousClock.now - lastFlush >= flushInterval {
                        try await batch.flush(to: part)
                        plan.wrote(upTo: batch.offset, segmentStart: start)
                        lastFlush = .now
                    }
                }
                if allowed < count || (complete && position < (segment.expectedEnd ?? .max)) {
                    // The segment ends before this response does: another connection has the rest.
                    break
                }
            }
        } catch let error as Restart {
            throw error
        } catch let error as HaulError where error.code != .connection {
            try? await batch.flush(to: part, evenIfStopped: true)
            plan.wrote(upTo: batch.offset, segmentStart: start)
            throw error
        } catch {
            // The connection broke or we were stopped: keep what arrived, then report.
            try await batch.flush(to: part, evenIfStopped: true)
            plan.wrote(upTo: batch.offset, segmentStart: start)
            if control.requested != nil || error is CancellationError { throw CancellationError() }
            // A timeout says more than "ended early"; any other break before the promised end
            // is rule 8's short body.
            if let end = segment.expectedEnd, position < end, !HTTPTransport.isTimeout(error) {
                throw endedEarly(segment, at: position, end: end)
            }
            throw transport.connectionError(error, url: url)
        }
        try await batch.flush(to: part)
        plan.wrote(upTo: batch.offset, segmentStart: start)
        if overlapChecked < overlap.count {
            throw HaulError(
                .connection,
                "The response ended inside the overlap check for \(url.absoluteString)",
                url: url
            )
        }
        if let end = plan.segment(at: start)?.end, position < end {
            // Rule 8: short is a network failure, never a finished file.
            throw endedEarly(segment, at: position, end: min(end, segment.expectedEnd ?? end))
        }
    }

    /// Rule 8's failure: the body stopped before the bytes it promised.
    private func endedEarly(_ segment: SegmentResponse, at position: Int64, end: Int64) -> HaulError {
        let received = position - segment.bodyOffset
        let promised = end - segment.bodyOffset
        return HaulError(
            .connection,
            "The response for \(url.absoluteString) ended early: received \(received) of \(promised) bytes",
            url: url
        )
    }
}

extension SegmentPlan {
    /// The segment that starts at `start`, if there is one.
    func segment(at start: Int64) -> Segment? {
        index(startingAt: start).map(segment)
    }
}
