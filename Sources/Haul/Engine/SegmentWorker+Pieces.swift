import Foundation
import Logging
import NIOCore

/// Checking a download's pieces against their hashes (a Metalink's `<pieces>`), beside the
/// connections: each piece complete on disk is hashed from the part file; one that does not
/// match is fetched again — from a source that did not write it, when there is one — and
/// checked again; a source that served ``PieceVerifier/badPiecesToDrop`` bad pieces is
/// dropped for the download (docs/architecture.md, "Piece hashes").
extension SegmentWorker {
    /// Checks the pieces the verifier queues until it is closed (or the task cancelled).
    func checkPieces(_ verifier: PieceVerifier) async throws {
        while let piece = await verifier.next() {
            if control.requested != nil { throw CancellationError() }
            try await check(piece, verifier)
        }
    }

    /// Checks every piece not verified yet, the whole file being on disk: before it is placed.
    func checkAllPieces(_ verifier: PieceVerifier) async throws {
        verifier.reopen()
        verifier.enqueueUnverified { _ in true }
        verifier.close()
        try await checkPieces(verifier)
    }

    /// Hashes one piece; fetches it again until it matches, or fails the download when no
    /// source is left that could serve it right.
    private func check(_ piece: Int, _ verifier: PieceVerifier) async throws {
        let range = verifier.range(of: piece)
        let hashes = verifier.hashes
        let expected = Array(hashes.digest(piece))
        let place = "piece \(piece) (bytes \(range.lowerBound)–\(range.upperBound - 1))"
        // Each round either verifies the piece, or charges its writers a bad piece (dropping
        // one at its second): the sources run out before this bound is reached.
        for _ in 0..<(2 * DownloadSource.maxSources + 1) {
            let algorithm = hashes.algorithm
            let digest = try await FileIO.run { [part] in try part.digest(algorithm, of: range) }
            if digest == expected {
                verifier.verified(piece)
                logger.trace("piece verified", metadata: ["piece": "\(piece)"])
                return
            }
            let (writers, spent) = verifier.bad(piece)
            let names = writers.map { Redaction.url(sourceURL($0)) }.joined(separator: ", ")
            logger.warning(
                "piece did not match its hash; fetching it again",
                metadata: [
                    "piece": "\(piece)", "bytes": "\(range.lowerBound)-\(range.upperBound - 1)", "from": "\(names)",
                ]
            )
            for source in spent {
                let reason =
                    "\(PieceVerifier.badPiecesToDrop) of its pieces did not match their \(algorithm.name) hashes"
                guard let sources, drop(piecesOf: source, in: sources, because: reason) else {
                    throw HaulError(
                        .checksumMismatch,
                        "\(Redaction.url(sourceURL(source))) served pieces that do not match their \(algorithm.name) hashes (the last: \(place)), and no other source is left",
                        url: url,
                        hint: "Nothing was saved; give a mirror that serves the file, or check the Metalink"
                    )
                }
            }
            let source = try await refetch(range, avoiding: Set(writers), place: place)
            verifier.rewritten(piece, by: source)
        }
        throw HaulError(
            .checksumMismatch,
            "The \(place) of \(Redaction.url(url)) never matched its \(hashes.algorithm.name) hash",
            url: url,
            hint: "Nothing was saved; check the Metalink or the mirrors"
        )
    }

    private func sourceURL(_ index: Int) -> URL {
        guard let sources, index < sources.count else { return url }
        return sources.source(index).url
    }

    /// Drops a source that served bad pieces; false when it is the last one.
    private func drop(piecesOf index: Int, in pool: SourcePool, because reason: String) -> Bool {
        guard pool.drop(index, reason: reason) else { return false }
        logger.warning(
            "source dropped for this download; the others continue",
            metadata: ["source": "\(Redaction.url(pool.source(index).url))", "reason": "\(reason)"]
        )
        return true
    }

    /// The source to fetch a bad piece from: an active one that did not write it (verified
    /// first), else one that did. Nil when none is active.
    private func repairSource(avoiding writers: Set<Int>) -> Int? {
        guard let sources else { return 0 }
        let active = (0..<sources.count).filter { sources.isActive($0) }
        return active.first { !writers.contains($0) && sources.source($0).verified }
            ?? active.first { !writers.contains($0) }
            ?? active.first
    }

    /// Fetches `range` again from a source, retrying a failing one after its backoff and
    /// moving on from one that cannot serve it. Returns the source whose bytes were written.
    private func refetch(_ range: Range<Int64>, avoiding writers: Set<Int>, place: String) async throws -> Int {
        var failures = 0
        while true {
            guard let index = repairSource(avoiding: writers) else {
                throw HaulError(
                    .connection,
                    "No source is left to fetch the \(place) of \(Redaction.url(url)) again",
                    url: url
                )
            }
            let source: ChosenSource
            if let sources {
                source = chosen(index, in: sources)
            } else {
                source = ChosenSource(index: 0, url: url, rules: rules)
            }
            do {
                try await write(range, from: source)
                logger.notice(
                    "piece fetched again",
                    metadata: [
                        "bytes": "\(range.lowerBound)-\(range.upperBound - 1)", "from": "\(Redaction.url(source.url))",
                    ]
                )
                return index
            } catch {
                switch AttemptOutcome(error, stopRequested: control.requested != nil) {
                case .stopped, .done, .stepAside:
                    throw CancellationError()
                case let .restart(restart):
                    // This source's copy is another file: the others serve the piece.
                    guard let sources, drop(piecesOf: index, in: sources, because: restart.reason) else {
                        throw restart
                    }
                case let .failed(error):
                    guard let sources, let failure = error as? HaulError, failure.code.isSourceFault,
                        drop(piecesOf: index, in: sources, because: failure.message)
                    else { throw error }
                case let .retry(error):
                    failures += 1
                    guard failures <= retry.maxRetries else { throw retry.givenUp(error) }
                    try await timeline.sleep(for: try retry.delay(retrying: error, attempt: failures))
                }
            }
        }
    }

    /// Asks `source` for exactly `range` (with its `If-Range`) and writes the answer over
    /// the part file's bytes there.
    private func write(_ range: Range<Int64>, from source: ChosenSource) async throws {
        let last = range.upperBound - 1
        let response = try await transport.get(
            source.url,
            headers: headers,
            range: "bytes=\(range.lowerBound)-\(last)",
            ifRange: source.rules.ifRange,
            logger: logger
        )
        switch source.rules.classifySegment(
            status: response.status,
            headers: response.headers,
            requestStart: range.lowerBound,
            requestLast: last
        ) {
        case .continues:
            break
        case let .restart(reason, _):
            await HTTPTransport.discard(response.head.body)
            throw Restart(reason: reason)
        case .failure:
            throw await HTTPTransport.failure(response, url: source.url)
        }
        var batch = WriteBatch(offset: range.lowerBound, site: response.site, placement: writePlacement)
        do {
            for try await buffer in response.head.body {
                guard batch.offset + Int64(batch.count + buffer.readableBytes) <= range.upperBound else {
                    throw HaulError(
                        .invalidResponse,
                        "The server sent more bytes than asked for (\(range.count)) for \(source.url.absoluteString)",
                        url: source.url
                    )
                }
                for limiter in limiters { try await limiter.take(buffer.readableBytes) }
                batch.append(buffer)
                if batch.isFull { try await batch.flush(to: part) }
            }
            try await batch.flush(to: part)
        } catch let error as HaulError {
            throw error
        } catch {
            if control.requested != nil || error is CancellationError { throw error }
            throw transport.connectionError(error, url: source.url)
        }
        guard batch.offset == range.upperBound else {
            throw HaulError(
                .connection,
                "The response for \(source.url.absoluteString) ended early: received \(batch.offset - range.lowerBound) of \(range.count) bytes",
                url: source.url
            )
        }
    }
}
