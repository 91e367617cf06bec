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

    /// How comparing a mirror's bytes with the file's ended.
    enum Verdict {
        case verified
        case dropped
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
        guard let index = pool.take() else {
            guard pool.awaitsVerification else { return .none }
            // A mirror is being checked and has room: this connection is for it.
            do {
                try await Task.sleep(for: .milliseconds(20))
            } catch {
                throw control.requested != nil ? CancellationError() : error
            }
            return .again
        }
        do {
            if !pool.source(index).verified, try await verify(index, in: pool) != .verified {
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
                try await crossCheck(from..<to, servedBy: source, in: pool)
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
    private func drop(_ index: Int, in pool: SourcePool, because reason: String) -> Bool {
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

    // MARK: Verifying a mirror

    /// Compares a mirror's bytes with bytes another source already wrote: 64 KiB asked for
    /// at a place on disk (the latest written, once there are that many), with its length.
    /// Agreeing, it is verified with the validators of its answer; disagreeing, the other
    /// sources not yet compared are asked for the same bytes, and the majority decides: the
    /// mirror is dropped, or the download fails naming the sources when the file's own
    /// bytes are not the majority's (they are never mixed with another file's).
    func verify(_ index: Int, in pool: SourcePool) async throws -> Verdict {
        let window = try await writtenWindow(pool)
        let expected = try await FileIO.run { [part] in try part.read(at: window.lowerBound, count: Int(window.count)) }
        let source = chosen(index, in: pool)
        var received: [UInt8] = []
        var validators = Validators()
        // Asked again after each backoff until its retries are spent.
        asking: while true {
            switch await sample(source, window) {
            case let .bytes(bytes, learnt):
                (received, validators) = (bytes, learnt)
                break asking
            case let .unusable(reason):
                guard drop(index, in: pool, because: reason) else { throw lastSourceFails(source.url, reason) }
                return .dropped
            case let .failed(error):
                let failures = pool.failed(index)
                guard failures <= retry.maxRetries else {
                    guard drop(index, in: pool, because: "\(error.message) (after \(retry.maxRetries) retries)")
                    else { throw retry.givenUp(error) }
                    return .dropped
                }
                try await timeline.sleep(for: (try? retry.delay(retrying: error, attempt: failures)) ?? .seconds(1))
            }
        }
        if received == expected {
            pool.verified(index, validators: validators)
            logger.info(
                "mirror verified: its bytes agree with the file's",
                metadata: ["source": "\(Redaction.url(source.url))", "at": "\(window.lowerBound)"]
            )
            return .verified
        }
        return try await outvote(index, in: pool, at: window, expected: expected, received: received)
    }

    /// A mirror whose bytes at `window` disagree with the file's: the other sources not yet
    /// compared are asked for the same bytes, and the majority decides — the mirror is
    /// dropped, the file starts over from the majority (its own sources outvoted), or the
    /// download fails naming the sources when no side has it.
    private func outvote(
        _ index: Int,
        in pool: SourcePool,
        at window: Range<Int64>,
        expected: [UInt8],
        received: [UInt8]
    ) async throws -> Verdict {
        let source = chosen(index, in: pool)
        // Disagreement: who else says what at the same place?
        var forFile = pool.verifiedCount
        var forMirror = [source.url]
        var asked: [URL] = []
        for other in 0..<pool.count where other != index && pool.isActive(other) && !pool.source(other).verified {
            let mirror = chosen(other, in: pool)
            guard case let .bytes(bytes, learnt) = await sample(mirror, window) else { continue }
            asked.append(mirror.url)
            if bytes == expected {
                forFile += 1
                pool.verified(other, validators: learnt)
            } else if bytes == received {
                forMirror.append(mirror.url)
            }
        }
        let place = "bytes \(window.lowerBound)–\(window.upperBound - 1)"
        if forMirror.count > forFile {
            // The file's own bytes are the minority's: its sources go, and the download
            // starts over from the majority.
            let reason = "its \(place) differ from the majority of the sources'"
            let dropped = pool.dropVerified(reason: reason)
            if !dropped.isEmpty {
                for index in dropped {
                    logger.warning(
                        "source dropped for this download; the others continue",
                        metadata: [
                            "source": "\(Redaction.url(chosen(index, in: pool).url))",
                            "reason": "\(Redaction.text(reason))",
                        ]
                    )
                }
                throw Restart(reason: "the mirrors outvote the bytes written so far at \(place)")
            }
        }
        if forFile > forMirror.count {
            for url in forMirror {
                if let other = (0..<pool.count).first(where: { chosen($0, in: pool).url == url }) {
                    _ = drop(other, in: pool, because: "its \(place) differ from the other sources'")
                }
            }
            return .dropped
        }
        let names = forMirror.map { Redaction.url($0) }.joined(separator: ", ")
        throw HaulError(
            .representationChanged,
            "The sources disagree about \(place) of \(Redaction.url(url)): \(names) \(forMirror.count == 1 ? "serves" : "serve") other bytes than the file written so far",
            url: url,
            hint: "Drop the mirrors that serve another file, or give --checksum to know which is right"
        )
    }

    /// Compares one 64 KiB window, at a random place, of `stretch` — bytes the mirror
    /// `index` just wrote — with the URL's bytes there. A mirror that agrees goes on; one that
    /// does not is dropped and the file starts over without it: its other stretches cannot be
    /// told from the rest, and the file is never a mix. The URL that cannot answer leaves the
    /// stretch unchecked (its own failure is dealt with where it fetches). Without a checksum,
    /// a server digest or piece hashes, this is what a mirror's bytes are held to.
    func crossCheck(_ stretch: Range<Int64>, servedBy index: Int, in pool: SourcePool) async throws {
        let length = stretch.upperBound - stretch.lowerBound
        let size = min(Int64(TransferRules.overlapLength), length)
        let offset = length > size ? Int64.random(in: 0...(length - size)) : 0
        let window = (stretch.lowerBound + offset)..<(stretch.lowerBound + offset + size)
        let written = try await FileIO.run { [part] in try part.read(at: window.lowerBound, count: Int(window.count)) }
        let first = chosen(lead, in: pool)
        guard pool.isActive(lead), case let .bytes(bytes, _) = await sample(first, window, ifRange: first.rules.ifRange)
        else { return }
        if bytes == written { return }
        let place = "bytes \(window.lowerBound)–\(window.upperBound - 1)"
        let reason = "its \(place) differ from the URL's"
        guard drop(index, in: pool, because: reason) else {
            throw HaulError(
                .representationChanged,
                "The sources disagree about \(place) of \(Redaction.url(url))",
                url: url,
                hint: "Give --checksum to know which is right"
            )
        }
        var restart = Restart(reason: "a mirror wrote other bytes than the URL's at \(place)")
        restart.keepsLead = true
        throw restart
    }

    /// The last source left cannot serve the file: the download fails saying why.
    private func lastSourceFails(_ source: URL, _ reason: String) -> HaulError {
        HaulError(
            .invalidResponse,
            "The last source left, \(Redaction.url(source)), cannot serve \(Redaction.url(url)): \(reason)",
            url: url,
            hint: "Give a URL or mirror that serves the file"
        )
    }

    private enum Sample {
        case bytes([UInt8], Validators)
        /// The source cannot serve this file: another length, no ranges, a status no retry mends.
        case unusable(String)
        case failed(HaulError)
    }

    /// Asks `source` for `window` of the file: without `If-Range` for a mirror being
    /// verified (its validators are learnt from this answer), with `ifRange` for a source
    /// whose validators are known (a 200 then says its file changed).
    private func sample(_ source: ChosenSource, _ window: Range<Int64>, ifRange: String? = nil) async -> Sample {
        do {
            let response = try await transport.get(
                source.url,
                headers: headers,
                range: "bytes=\(window.lowerBound)-\(window.upperBound - 1)",
                ifRange: ifRange,
                logger: logger
            )
            guard response.status == 206 else {
                let error = await HTTPTransport.failure(response, url: source.url)
                if response.status == 200 { return .unusable("it does not serve ranges (HTTP 200 to a range request)") }
                return error.isRetryable ? .failed(error) : .unusable(error.message)
            }
            if case let .failure(restart) = source.rules.checkPartial(
                response.headers,
                requestStart: window.lowerBound,
                requestLast: window.upperBound - 1
            ) {
                await HTTPTransport.discard(response.head.body)
                return .unusable(restart.reason)
            }
            var bytes: [UInt8] = []
            let wanted = Int(window.count)
            bytes.reserveCapacity(wanted)
            for try await buffer in response.head.body {
                guard bytes.count + buffer.readableBytes <= wanted else {
                    return .unusable("it sent more bytes than its Content-Range says")
                }
                bytes.append(contentsOf: buffer.readableBytesView)
            }
            guard bytes.count == wanted else {
                return .failed(
                    HaulError(
                        .connection,
                        "The response of \(source.url.absoluteString) ended early: \(bytes.count) of \(wanted) bytes",
                        url: source.url
                    )
                )
            }
            return .bytes(bytes, Validators(headers: response.headers, totalLength: rules.totalLength))
        } catch {
            return .failed(transport.connectionError(error, url: source.url))
        }
    }

    /// The latest 64 KiB another source wrote, waiting for them when the download has just
    /// begun (its first response writes them within moments).
    private func writtenWindow(_ pool: SourcePool) async throws -> Range<Int64> {
        let size = TransferRules.overlapLength
        while true {
            var best: Range<Int64>?
            for index in 0..<plan.count {
                let segment = plan.segment(index)
                if segment.written - segment.start >= size {
                    best = (segment.written - size)..<segment.written
                    break
                }
            }
            if let best { return best }
            if control.requested != nil { throw CancellationError() }
            guard pool.verifiedCount > 0 else {
                throw HaulError(
                    .connection,
                    "No source of \(Redaction.url(url)) is left whose bytes are known to be the file's: the mirrors cannot be checked",
                    url: url,
                    hint: "Check the URL; a mirror can be given as the URL"
                )
            }
            try await Task.sleep(for: .milliseconds(20))
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
