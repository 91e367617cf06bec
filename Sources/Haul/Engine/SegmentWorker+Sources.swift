import Foundation
import Logging
import NIOCore

/// One connection of a download with mirrors: it takes a source (``SourcePool``), then
/// segments, and fetches them from that source until it fails; a failing source is left
/// for another at once, and dropped for the download once its retries are spent or its
/// answer shows it cannot serve this file (docs/architecture.md, "Several sources").
extension SegmentWorker {
    /// A source a connection uses: where it is, and the rules its answers are read by (its
    /// own validators, the file's length).
    struct ChosenSource: Sendable {
        var index: Int
        var url: URL
        var rules: TransferRules
    }

    func chosen(_ index: Int, in pool: SourcePool) -> ChosenSource {
        let source = pool.source(index)
        if index == lead { return ChosenSource(index: index, url: source.url, rules: rules) }
        var validators = source.validators ?? Validators()
        validators.totalLength = rules.totalLength
        return ChosenSource(index: index, url: source.url, rules: TransferRules(validators))
    }

    /// What a connection holds while it works over several sources: a source from the
    /// pool, and a segment from the plan. Whatever it holds when it stops goes back.
    struct Hold {
        var source: Int?
        var segmentStart: Int64?
    }

    /// What taking a source gave.
    private enum Take {
        case source(Int)
        /// Nothing now, but maybe soon (a mirror is being checked): ask again.
        case again
        /// No source can take a connection.
        case none
    }

    /// Works until there is nothing left to claim, or no source can take a connection.
    func run(over pool: SourcePool, first: SegmentResponse?) async throws {
        var hold = Hold()
        defer {
            if let source = hold.source { pool.putBack(source) }
            if let start = hold.segmentStart { plan.free(segmentStart: start) }
        }
        var pending: HaulError?
        if let first {
            // The first response is the lead's, its connection taken before any other
            // connection chose a source (``Transfer``'s runConnections).
            hold = Hold(source: lead, segmentStart: first.segmentStart)
            pending = try await streamFirst(first)
            if pending == nil { hold.segmentStart = nil }
        }
        while true {
            if let source = hold.source, !pool.isActive(source) {
                // Dropped meanwhile (its pieces did not match): its segment goes to the others.
                pool.putBack(source)
                hold.source = nil
                if let start = hold.segmentStart {
                    plan.free(segmentStart: start)
                    hold.segmentStart = nil
                }
            }
            if hold.source == nil {
                switch try await takeSource(from: pool) {
                case .source(let index): hold.source = index
                case .again: continue
                case .none: return
                }
            }
            guard let source = hold.source else { continue }
            if hold.segmentStart == nil {
                guard let index = plan.claim() else { return }
                hold.segmentStart = plan.segment(index).start
            }
            guard let start = hold.segmentStart else { continue }
            let from = plan.segment(at: start)?.written
            let outcome: AttemptOutcome
            if let failure = pending {
                pending = nil
                outcome = .retry(failure)
            } else {
                outcome = await fetchOnce(segmentStart: start, from: chosen(source, in: pool))
            }
            try await act(on: outcome, source: source, segmentStart: start, from: from, pool: pool, hold: &hold)
        }
    }

    /// Streams the lead's first response; the error to retry its segment with, ranged, when
    /// the open-ended response broke off.
    private func streamFirst(_ first: SegmentResponse) async throws -> HaulError? {
        do {
            try await stream(first, source: lead)
        } catch is SourceDropped {
            // The lead served bad pieces and was dropped: the loop lets it go.
        } catch {
            switch AttemptOutcome(error, stopRequested: control.requested != nil) {
            case let .retry(error) where rules.allowsRanges:
                return error  // Its segment continues with ranges.
            case let outcome:
                throw outcome.error ?? error
            }
        }
        plan.free(segmentStart: first.segmentStart)
        return nil
    }

    /// A source for this connection: an active one with room, compared with the file's
    /// bytes first when it is not verified yet.
    private func takeSource(from pool: SourcePool) async throws -> Take {
        let seen = pool.signal.generation
        guard let index = pool.take() else {
            guard pool.awaitsVerification else { return .none }
            // A mirror is being checked: this connection waits for it to be verified (or
            // dropped), or for a source to have room again.
            await pool.signal.wait(after: seen)
            try Task.checkCancellation()
            return .again
        }
        do {
            if !pool.source(index).verified, try await MirrorCheck(worker: self, pool: pool).verify(index) != .verified
            {
                pool.putBack(index)
                return .again
            }
        } catch {
            pool.putBack(index)
            throw error
        }
        return .source(index)
    }

    /// Acts on how a fetch of the segment at `start` from `source` ended.
    /// - Parameter from: what the segment held written before the fetch.
    private func act(
        on outcome: AttemptOutcome,
        source: Int,
        segmentStart start: Int64,
        from: Int64?,
        pool: SourcePool,
        hold: inout Hold
    ) async throws {
        switch outcome {
        case .done, .stepAside:
            if case .done = outcome, crossChecksMirrors, source != lead, let from,
                let to = plan.segment(at: start)?.written, to > from
            {
                try await MirrorCheck(worker: self, pool: pool).crossCheck(from..<to, servedBy: source)
            }
            plan.free(segmentStart: start)
            hold.segmentStart = nil
        case .stopped:
            throw CancellationError()
        case let .restart(restart):
            // This source's copy is not the file's any more (another version, another
            // length, a range refused): others finish it, while one verified remains.
            guard pool.verifiedCount > 1, drop(source, in: pool, because: restart.reason) else { throw restart }
            pool.putBack(source)
            hold.source = nil
        case let .failed(error):
            // A status no retry mends (404, 403, 410…) or a refused TLS handshake drops
            // the source; a local failure (the disk) fails the download.
            guard let error = error as? HaulError, error.code.isSourceFault,
                drop(source, in: pool, because: error.message)
            else { throw error }
            pool.putBack(source)
            hold.source = nil
        case let .retry(error):
            try await retrySource(source, after: error, segmentStart: start, pool: pool, hold: &hold)
        }
    }

    /// After `error` from `source`, which may pass: the source is dropped once its retries
    /// are spent; otherwise its segment goes to the other sources at once (when there are
    /// any) and this connection tries the source again after its backoff.
    private func retrySource(
        _ source: Int,
        after error: HaulError,
        segmentStart start: Int64,
        pool: SourcePool,
        hold: inout Hold
    ) async throws {
        let failures = pool.failed(source)
        if failures > retry.maxRetries {
            guard drop(source, in: pool, because: "\(error.message) (after \(retry.maxRetries) retries)") else {
                throw retry.givenUp(error)
            }
            pool.putBack(source)
            hold.source = nil
            return
        }
        if isOffline(url) { throw error }
        let alone = !pool.hasAlternative(to: source)
        if !alone {
            // Its segment goes to the other sources at once; this connection tries this
            // source again after its backoff, with whatever segment is left then.
            logger.debug(
                "source failed; its segment goes to the other sources",
                metadata: [
                    "source": "\(Redaction.url(chosen(source, in: pool).url))",
                    "error": "\(error.message)",
                ]
            )
            plan.free(segmentStart: start)
            hold.segmentStart = nil
        }
        do {
            let delay = try retry.delay(retrying: error, attempt: failures)
            if alone {
                try await progress.waiting(delay, after: error, attempt: failures, of: retry.maxRetries, on: timeline)
            } else {
                try await timeline.sleep(for: delay)
            }
        } catch {
            throw control.requested != nil ? CancellationError() : error
        }
    }

    /// Drops `index` with a logged reason; false when it is the last source.
    func drop(_ index: Int, in pool: SourcePool, because reason: String) -> Bool {
        let url = chosen(index, in: pool).url
        guard pool.drop(index, reason: reason) else { return false }
        logger.warning(
            "source dropped for this download; the others continue",
            metadata: ["source": "\(Redaction.url(url))", "reason": "\(Redaction.text(reason))"]
        )
        return true
    }

    /// One request for what is left of a segment, from one source, streamed to its end.
    private func fetchOnce(segmentStart start: Int64, from source: ChosenSource) async -> AttemptOutcome {
        guard let segment = plan.segment(at: start), let end = segment.end, segment.written < end else { return .done }
        do {
            try await stream(
                request(segmentStart: start, from: segment.written, to: end, source: source),
                source: source.index
            )
            return .done
        } catch is SourceDropped {
            return .stepAside  // The loop lets the dropped source go.
        } catch {
            return AttemptOutcome(error, stopRequested: control.requested != nil)
        }
    }
}

extension HaulError.Code {
    /// Whether a failure of this kind belongs to the server that answered (so another
    /// source may do better), not to this machine.
    var isSourceFault: Bool {
        switch self {
        case .httpStatus, .connection, .hostNotFound, .invalidResponse, .tls, .tooManyRedirects,
            .unsupportedRedirect:
            true
        default: false
        }
    }
}

/// A source was dropped for the download while one of its responses was streaming: the
/// connection leaves it (its segment goes back to be claimed).
struct SourceDropped: Error {}
