import Foundation
import Logging

/// A download's mirrors held to the file's bytes (docs/architecture.md, "Several sources"):
/// a mirror takes segments only once 64 KiB of it agree with bytes another source wrote; a
/// disagreement is settled by the majority of the sources, and the file is never a mix of
/// two; when nothing checks the whole file, each stretch a mirror writes is compared in a
/// window with the URL's bytes. The checks run on a connection (``SegmentWorker``), with
/// its transport, part file and plan.
struct MirrorCheck {
    let worker: SegmentWorker
    let pool: SourcePool

    /// How comparing a mirror's bytes with the file's ended.
    enum Verdict {
        case verified
        case dropped
    }

    private var url: URL { worker.url }
    private var logger: Logger { worker.logger }
    private var retry: RetryPolicy { worker.retry }
    private var timeline: Timeline { worker.timeline }
    private var part: PartFile { worker.part }
    private var plan: SegmentPlan { worker.plan }
    private var control: TransferControl { worker.control }
    private var transport: HTTPTransport { worker.transport }
    private var headers: [HTTPHeaderField] { worker.headers }
    private var rules: TransferRules { worker.rules }
    private var lead: Int { worker.lead }

    /// Compares a mirror's bytes with bytes another source already wrote: 64 KiB asked for
    /// at a place on disk (the latest written, once there are that many), with its length.
    /// Agreeing, it is verified with the validators of its answer; disagreeing, the other
    /// sources not yet compared are asked for the same bytes, and the majority decides: the
    /// mirror is dropped, or the download fails naming the sources when the file's own
    /// bytes are not the majority's (they are never mixed with another file's).
    func verify(_ index: Int) async throws -> Verdict {
        let window = try await writtenWindow()
        let expected = try await FileIO.run { [part] in try part.read(at: window.lowerBound, count: Int(window.count)) }
        let source = worker.chosen(index, in: pool)
        let received: [UInt8]
        let validators: Validators
        switch try await sampleRetrying(source, window) {
        case let .bytes(bytes, learnt):
            (received, validators) = (bytes, learnt)
        case let .unusable(reason):
            guard worker.drop(index, in: pool, because: reason) else { throw lastSourceFails(source.url, reason) }
            return .dropped
        case let .failed(error):
            guard worker.drop(index, in: pool, because: "\(error.message) (after \(retry.maxRetries) retries)")
            else { throw retry.givenUp(error) }
            return .dropped
        }
        if received == expected {
            pool.verified(index, validators: validators)
            logger.info(
                "mirror verified: its bytes agree with the file's",
                metadata: ["source": "\(Redaction.url(source.url))", "at": "\(window.lowerBound)"]
            )
            return .verified
        }
        return try await outvote(index, at: window, expected: expected, received: received)
    }

    /// A mirror whose bytes at `window` disagree with the file's: the other sources not yet
    /// compared are asked for the same bytes, and the majority decides — the mirror is
    /// dropped, the file starts over from the majority (its own sources outvoted), or the
    /// download fails naming the sources when no side has it.
    private func outvote(
        _ index: Int,
        at window: Range<Int64>,
        expected: [UInt8],
        received: [UInt8]
    ) async throws -> Verdict {
        // Disagreement: who else says what at the same place?
        var forFile = pool.verifiedCount
        var forMirror = [index]
        for other in 0..<pool.count where other != index && pool.isActive(other) && !pool.source(other).verified {
            // One that cannot answer has no say; it is compared on its own later.
            guard case let .bytes(bytes, learnt) = try await sampleRetrying(worker.chosen(other, in: pool), window)
            else { continue }
            if bytes == expected {
                forFile += 1
                pool.verified(other, validators: learnt)
            } else if bytes == received {
                forMirror.append(other)
            }
        }
        // A stop cut the samples short: the vote is not the sources' and decides nothing.
        try Task.checkCancellation()
        let place = "bytes \(window.lowerBound)–\(window.upperBound - 1)"
        if forMirror.count > forFile {
            // The file's own bytes are the minority's: its sources go, and the download
            // starts over from the majority — also when another connection, checking another
            // mirror, counted the same vote first and dropped them.
            let reason = "its \(place) differ from the majority of the sources'"
            let outcome = pool.outvoteFile(reason: reason)
            if case let .dropped(dropped) = outcome {
                for index in dropped {
                    logger.warning(
                        "source dropped for this download; the others continue",
                        metadata: [
                            "source": "\(Redaction.url(worker.chosen(index, in: pool).url))",
                            "reason": "\(Redaction.text(reason))",
                        ]
                    )
                }
            }
            if outcome != .kept { throw Restart(reason: "the mirrors outvote the bytes written so far at \(place)") }
        }
        if forFile > forMirror.count {
            for other in forMirror {
                _ = worker.drop(other, in: pool, because: "its \(place) differ from the other sources'")
            }
            return .dropped
        }
        let names = forMirror.map { Redaction.url(pool.source($0).url) }.joined(separator: ", ")
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
    func crossCheck(_ stretch: Range<Int64>, servedBy index: Int) async throws {
        let length = stretch.upperBound - stretch.lowerBound
        let size = min(Int64(TransferRules.overlapLength), length)
        let offset = length > size ? Int64.random(in: 0...(length - size)) : 0
        let window = (stretch.lowerBound + offset)..<(stretch.lowerBound + offset + size)
        let written = try await FileIO.run { [part] in try part.read(at: window.lowerBound, count: Int(window.count)) }
        let first = worker.chosen(lead, in: pool)
        guard pool.isActive(lead), case let .bytes(bytes, _) = await sample(first, window, ifRange: first.rules.ifRange)
        else { return }
        if bytes == written { return }
        let place = "bytes \(window.lowerBound)–\(window.upperBound - 1)"
        let reason = "its \(place) differ from the URL's"
        guard worker.drop(index, in: pool, because: reason) else {
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

    /// Asks `source` for `window`, again after each backoff while its failures in a row
    /// stay within the retries: a vote or a verification is not decided by a connection
    /// that broke once. `.failed` once they are spent.
    private func sampleRetrying(_ source: SegmentWorker.ChosenSource, _ window: Range<Int64>) async throws -> Sample {
        while true {
            let answer = await sample(source, window)
            guard case let .failed(error) = answer else { return answer }
            let failures = pool.failed(source.index)
            guard failures <= retry.maxRetries else { return answer }
            try await timeline.sleep(for: (try? retry.delay(retrying: error, attempt: failures)) ?? .seconds(1))
        }
    }

    /// Asks `source` for `window` of the file: without `If-Range` for a mirror being
    /// verified (its validators are learnt from this answer), with `ifRange` for a source
    /// whose validators are known (a 200 then says its file changed).
    private func sample(
        _ source: SegmentWorker.ChosenSource,
        _ window: Range<Int64>,
        ifRange: String? = nil
    ) async -> Sample {
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
    private func writtenWindow() async throws -> Range<Int64> {
        let size = TransferRules.overlapLength
        while true {
            let seen = plan.signal.generation
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
            await plan.signal.wait(after: seen)
            try Task.checkCancellation()
        }
    }
}
