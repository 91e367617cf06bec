import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

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
    /// The range rules over the representation being fetched: `If-Range` for every ranged
    /// request, and what each answer means.
    var rules: TransferRules
    var limiters: [RateLimiter]
    var progress: ProgressBox
    var control: TransferControl
    var retry: RetryPolicy
    /// Received bytes wait in the batch at most this long before they are written, so a
    /// slow connection's bytes reach the next checkpoint too.
    var flushInterval: Duration
    var logger: Logger
    /// Whether the server has no usable route now (the manager then waits for the network).
    var isOffline: @Sendable (URL) -> Bool = { _ in false }
    /// The download's sources when it has mirrors (SegmentWorker+Sources.swift); nil for the
    /// URL alone.
    var sources: SourcePool?
    /// The source whose validators ``rules`` holds (the lead, ``SourcePool/lead``).
    var lead = 0
    /// The download's piece hashes and what is known of its pieces, when it has them
    /// (SegmentWorker+Pieces.swift).
    var pieces: PieceVerifier?
    /// The speed each connection must keep; nil for none.
    var lowestSpeed: LowestSpeed?
    /// Whether each stretch a mirror writes is compared with the URL's bytes in a window
    /// (``MirrorCheck/crossCheck(_:servedBy:)``): when nothing checks the whole file.
    var crossChecksMirrors = false
    /// The download's share of its host's connections (``HostConnections``): asked at each
    /// segment boundary whether this connection gives way to another download. Nil: the
    /// connections are the download's alone (a single ``Downloader``, or mirrors, which
    /// each source caps).
    var share: HostConnections.Share?
    /// The time the connections measure (flushes, the speed floor) and wait (retries) by.
    var timeline = Timeline()
    /// Where received bytes are written; nil: on ``FileIO``'s threads.
    var writePlacement: WritePlacement?

    /// How a connection's work ended.
    enum Ending: Sendable, Equatable {
        /// Nothing left to claim, or it stepped aside, or the first response was the only
        /// stream.
        case finished
        /// It gave way to another download of its host at a segment boundary; the
        /// download's remaining segments stay to be claimed.
        case yielded
    }

    /// Works until there is nothing left to claim, or until it gives way to another
    /// download at a segment boundary. `first`, when given, is streamed first.
    @discardableResult
    func run(first: SegmentResponse?) async throws -> Ending {
        HaulMetrics.connection(open: true)
        defer { HaulMetrics.connection(open: false) }
        if let sources {
            try await run(over: sources, first: first)
            return .finished
        }
        if let first {
            var failure: HaulError?
            do {
                try await stream(first)
            } catch {
                switch AttemptOutcome(error, stopRequested: control.requested != nil) {
                case let .retry(error) where rules.allowsRanges:
                    // The open-ended first response broke; its segment continues with ranges.
                    failure = error
                case let outcome:
                    plan.free(segmentStart: first.segmentStart)
                    throw outcome.error ?? error
                }
            }
            // Without ranges the first response is the only stream: its failures go up to
            // the transfer, which applies the single-stream rules.
            guard rules.allowsRanges else {
                plan.free(segmentStart: first.segmentStart)
                return .finished
            }
            guard try await work(segmentStart: first.segmentStart, after: failure) else { return .finished }
        }
        guard rules.allowsRanges else { return .finished }
        while true {
            if share?.shouldYield() == true { return .yielded }
            guard let index = plan.claim() else { return .finished }
            guard try await work(segmentStart: plan.segment(index).start) else { return .finished }
        }
    }

    /// Finishes an owned segment and lets it go. Returns false when the connection stepped
    /// aside and should stop.
    private func work(segmentStart start: Int64, after failure: HaulError? = nil) async throws -> Bool {
        let outcome = await fetch(segmentStart: start, after: failure)
        switch outcome {
        case .stepAside:
            return false
        case .done:
            plan.free(segmentStart: start)
            return true
        case .restart, .retry, .stopped, .failed:
            plan.free(segmentStart: start)
            throw outcome.error ?? CancellationError()
        }
    }

    /// Fetches one claimed segment to its end, retrying broken connections with backoff.
    /// `failure`, when given, is how the previous response for it ended: it counts as the
    /// first. Never `.retry`: a retry is made here, or given up on as `.failed`.
    private func fetch(segmentStart start: Int64, after failure: HaulError? = nil) async -> AttemptOutcome {
        var failures = 0
        var pending = failure
        var lastFailure = failure
        while let segment = plan.segment(at: start), let end = segment.end, segment.written < end {
            let before = segment.written
            let outcome: AttemptOutcome
            if let failure = pending {
                pending = nil
                outcome = .retry(failure)
            } else {
                do {
                    try await stream(request(segmentStart: start, from: segment.written, to: end))
                    return .done
                } catch {
                    outcome = AttemptOutcome(error, stopRequested: control.requested != nil)
                }
            }
            let error: HaulError
            switch outcome {
            case let .retry(failure): error = failure
            case var .restart(restart):
                restart.after = restart.after ?? lastFailure
                return .restart(restart)
            default: return outcome
            }
            lastFailure = error
            if (plan.segment(at: start)?.written ?? 0) > before { failures = 0 }
            failures += 1
            // With other connections still working, a failing one steps aside: its
            // segment goes back to be claimed (servers that cap connections per client
            // answer the extra ones with 503 or 429).
            if failures > 1 || error.status != nil, plan.stepAside(segmentStart: start) {
                logger.debug("connection steps aside", metadata: ["error": "\(error.message)"])
                return .stepAside
            }
            guard failures <= retry.maxRetries else {
                return .failed(retry.givenUp(error))
            }
            // No route: waiting here would spend the retries on nothing.
            if isOffline(url) { return .failed(error) }
            do {
                try await retry.wait(
                    try retry.delay(retrying: error, attempt: failures),
                    attempt: failures,
                    after: error,
                    progress: progress,
                    logger: logger,
                    timeline: timeline,
                    saying: "retrying segment",
                    ["start": "\(start)"]
                )
            } catch {
                // A wait longer than allowed (final), or a stop during the backoff.
                return control.requested != nil ? .stopped : .failed(error)
            }
        }
        return .done
    }

    /// Asks for `from..<to` of the file: `bytes=from-(to-1)`, or `bytes=from-` for the
    /// file's last segment — starting up to 64 KiB earlier when the segment already holds
    /// bytes, which are compared with the disk before anything is written (rule 7), unless
    /// piece hashes check every byte.
    func request(
        segmentStart start: Int64,
        from: Int64,
        to end: Int64,
        source: ChosenSource? = nil
    ) async throws -> SegmentResponse {
        let url = source?.url ?? url
        let rules = source?.rules ?? rules
        let last = end == rules.totalLength ? nil : end - 1
        let overlap = TransferRules.overlap(segmentStart: start, from: from, piecesChecked: pieces != nil)
        let part = part
        let expected =
            overlap > 0 ? try await FileIO.run { try part.read(at: from - overlap, count: Int(overlap)) } : []
        guard expected.count == Int(overlap) else {
            throw Restart(reason: "the part file is shorter than the bytes written to it")
        }
        let requestStart = from - overlap
        let response = try await transport.get(
            url,
            headers: headers,
            range: "bytes=\(requestStart)-\(last.map(String.init) ?? "")",
            ifRange: rules.ifRange,
            logger: logger
        )
        switch rules.classifySegment(
            status: response.status,
            headers: response.headers,
            requestStart: requestStart,
            requestLast: last
        ) {
        case let .continues(end):
            return SegmentResponse(
                response: response,
                segmentStart: start,
                bodyOffset: requestStart,
                overlap: expected,
                expectedEnd: end,
                mirror: source.flatMap { $0.url == url ? nil : $0.url }
            )
        case let .restart(reason, carriesWholeFile):
            if response.status == 416 { await HTTPTransport.discard(response.head.body) }
            throw Restart(reason: reason, response: carriesWholeFile ? response : nil)
        case .failure:
            throw await HTTPTransport.failure(response, url: url)
        }
    }

    /// Writes a response's body into its segment in batches, up to the segment's end.
    ///
    /// The first `overlap` bytes are compared with the disk, not written (rule 7). When
    /// another connection moved the end down, the rest of the response is abandoned; when
    /// the response should cover the segment exactly, it is read to its end so a body longer
    /// than promised is caught (rule 8).
    func stream(_ segment: SegmentResponse, source: Int? = nil) async throws {
        // On the loop that reads the body: its batches and writes there wake no other thread.
        try await withTaskExecutorPreference(segment.response.site?.executor) {
            try await streamBody(segment, source: source)
        }
    }

    private func streamBody(_ segment: SegmentResponse, source: Int?) async throws {
        let url = segment.mirror ?? url
        let start = segment.segmentStart
        var position = segment.bodyOffset
        var overlap = segment.overlap
        var overlapChecked = 0
        let site = segment.response.site
        var batch = WriteBatch(offset: position + Int64(overlap.count), site: site, placement: writePlacement)
        // A source is credited with the bytes of it that reach the file, as they are written;
        // the pieces they complete are queued for checking.
        var credited = batch.offset
        func credit() {
            guard batch.offset > credited else { return }
            if let source { sources?.delivered(Int(batch.offset - credited), by: source) }
            pieces?.wrote(credited..<batch.offset, by: source ?? lead, isWritten: plan.isWritten)
            credited = batch.offset
        }
        var lastFlush = timeline.now
        var speedFloor = lowestSpeed.map { SpeedFloor($0, start: lastFlush) }
        do {
            for try await var buffer in segment.response.head.body {
                // The clock read once per chunk, for the speed floor and the flush.
                let now = timeline.now
                if var floor = speedFloor {
                    if floor.record(buffer.readableBytes, at: now) { throw floor.failure(url: url) }
                    speedFloor = floor
                }
                if overlapChecked < overlap.count, buffer.readableBytes > 0 {
                    let n = try SegmentResponse.compare(&buffer, with: overlap, from: overlapChecked)
                    overlapChecked += n
                    position += Int64(n)
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
                    if batch.isFull || now - lastFlush >= flushInterval {
                        try await batch.flush(to: part)
                        plan.wrote(upTo: batch.offset, segmentStart: start)
                        credit()
                        lastFlush = now
                        // Dropped meanwhile (its pieces did not match): it sends no more.
                        if let source, let sources, !sources.isActive(source) { throw SourceDropped() }
                    }
                }
                if allowed < count || (complete && position < (segment.expectedEnd ?? .max)) {
                    // The segment ends before this response does: another connection has the rest.
                    break
                }
            }
        } catch {
            let error = try await broke(segment, with: error, at: position, keeping: &batch, url: url)
            credit()
            throw error
        }
        try await batch.flush(to: part)
        plan.wrote(upTo: batch.offset, segmentStart: start)
        credit()
        try checkEnd(of: segment, at: position, overlapLeft: overlap.count - overlapChecked, url: url)
    }

    /// A response that ended at `position` ended where its segment does: not inside the
    /// overlap check, and not short (rule 8: short is a network failure, never a finished file).
    private func checkEnd(of segment: SegmentResponse, at position: Int64, overlapLeft: Int, url: URL) throws {
        if overlapLeft > 0 {
            throw HaulError(
                .connection,
                "The response ended inside the overlap check for \(url.absoluteString)",
                url: url
            )
        }
        if let end = plan.segment(at: segment.segmentStart)?.end, position < end {
            throw endedEarly(segment, at: position, end: min(end, segment.expectedEnd ?? end), url: url)
        }
    }

    /// What a stream that ended with `error` reports, after keeping what arrived. Decided
    /// in one place, by what the error is:
    /// - another version (``Restart``): its bytes are not written, it goes up as it is;
    /// - a stop (requested, or the task cancelled): what arrived is kept, the stop goes up;
    /// - Haul's own verdict (too many bytes, a file system error): kept, and it goes up;
    /// - the network: kept, and reported as rule 8's short body when the response promised
    ///   more, else in words (timed out, closed).
    private func broke(
        _ segment: SegmentResponse,
        with error: any Error,
        at position: Int64,
        keeping batch: inout WriteBatch,
        url: URL
    ) async throws -> any Error {
        if error is Restart { return error }
        if error is SourceDropped {
            // Its bytes so far are kept (their pieces are checked); it is asked for no more.
            try await batch.flush(to: part, evenIfStopped: true)
            plan.wrote(upTo: batch.offset, segmentStart: segment.segmentStart)
            return error
        }
        // A failure found here (not the connection's): kept as it is. A connection broken for
        // being too slow is one of them, though its code is a connection's.
        let verdict = (error as? HaulError).flatMap { $0.code == .connection && !SpeedFloor.isTooSlow($0) ? nil : $0 }
        do {
            try await batch.flush(to: part, evenIfStopped: true)
        } catch  where verdict != nil {
            // The verdict says more than the write that failed after it.
        }
        plan.wrote(upTo: batch.offset, segmentStart: segment.segmentStart)
        // A stop goes up as it came; the attempt's outcome reads it (AttemptOutcome).
        if control.requested != nil || error is CancellationError { return error }
        if let verdict { return verdict }
        // A timeout says more than "ended early"; any other break before the promised end
        // is rule 8's short body.
        if let end = segment.expectedEnd, position < end, !HTTPTransport.isTimeout(error) {
            return endedEarly(segment, at: position, end: end, url: url)
        }
        return transport.connectionError(error, url: url)
    }

    /// Rule 8's failure: the body stopped before the bytes it promised.
    private func endedEarly(_ segment: SegmentResponse, at position: Int64, end: Int64, url: URL) -> HaulError {
        let received = position - segment.bodyOffset
        let promised = end - segment.bodyOffset
        return HaulError(
            .connection,
            "The response for \(url.absoluteString) ended early: received \(received) of \(promised) bytes",
            url: url
        )
    }
}
