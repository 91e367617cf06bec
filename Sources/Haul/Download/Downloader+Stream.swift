import AsyncHTTPClient
import Foundation
import NIOCore

/// What a finished stream delivered.
public struct StreamResult: Sendable, Equatable {
    /// The URL the body came from, after redirects.
    public var finalURL: URL
    /// Bytes handed to the sink.
    public var bytes: Int64
    /// The length the server announced, if it did. Without one, a connection closed early
    /// looks the same as the end, and a stream cannot ask what follows without resuming.
    public var totalBytes: Int64?
    /// The time from the first request to the last byte.
    public var elapsed: Duration
}

extension Downloader {
    /// Fetches `request.url` and hands its body to `sink` as it arrives: one connection, no
    /// part file, nothing recorded in the store, nothing resumed (what the sink was given
    /// cannot be taken back). `haul get -o -` is built on it.
    ///
    /// The request's headers, TLS options, proxies, credentials, cookies and rate limit apply,
    /// and redirects follow the same rules as a download's. Failures before the first byte
    /// (a refused connection, a 503) are retried by the downloader's ``RetryPolicy``; once
    /// the body has begun, a break ends the stream with an error. A checksum is computed as
    /// the bytes go and checked at the end: a mismatch throws
    /// ``HaulError/Code/checksumMismatch`` after the sink has seen every byte. The request's
    /// destination, session, connections and overwrite flag are not used.
    ///
    /// - Parameters:
    ///   - progress: called after each chunk, and when a retry waits, with the bytes so far
    ///     and the speed.
    ///   - sink: receives the body in order; what it throws ends the stream and is rethrown.
    /// - Throws: ``HaulError`` for the request, the network, an HTTP error status, a body
    ///   shorter or longer than announced, or a checksum mismatch.
    public func stream(
        _ request: DownloadRequest,
        progress: (DownloadProgress) -> Void = { _ in },
        into sink: (ByteBuffer) async throws -> Void
    ) async throws -> StreamResult {
        try request.validateFetching()
        let environment = self.environment
        let transport = try await environment.transport.configured(
            tls: request.tls,
            proxy: request.proxy,
            credentials: request.credentials,
            cookies: request.cookies,
            url: request.url
        )
        let stream = BodyStream(
            request: request,
            transport: transport,
            environment: environment,
            limiters: [
                RateLimiter(bytesPerSecond: request.rateLimit, clock: environment.timeline.clock),
                environment.globalLimiter,
            ],
            box: ProgressBox(timeline: environment.timeline)
        )
        do {
            let result = try await stream.run(progress: progress, into: sink)
            await transport.saveCookies(to: request.cookies.save, logger: environment.logger)
            return result
        } catch {
            await transport.saveCookies(to: request.cookies.save, logger: environment.logger)
            throw error
        }
    }
}

/// One body streamed to a sink (``Downloader/stream(_:progress:into:)``).
private struct BodyStream {
    var request: DownloadRequest
    var transport: HTTPTransport
    var environment: TransferEnvironment
    var limiters: [RateLimiter]
    /// Its progress, the speed measured on the downloader's clock.
    let box: ProgressBox

    /// What the sink threw, kept apart from the network's failures.
    struct SinkFailure: Error {
        var underlying: any Error
    }

    func run(
        progress: (DownloadProgress) -> Void,
        into sink: (ByteBuffer) async throws -> Void
    ) async throws -> StreamResult {
        let started = environment.timeline.now
        box.update { $0.fileName = request.url.lastPathComponent }
        let response = try await open(progress: progress)
        let total = try announcedLength(response)
        box.update { $0.totalBytes = total }
        var digest = request.checksum.map { AnyDigest($0.algorithm) }
        var position: Int64 = 0
        do {
            for try await buffer in response.head.body {
                let count = buffer.readableBytes
                guard count > 0 else { continue }
                if let total, position + Int64(count) > total {
                    throw HaulError(
                        .invalidResponse,
                        "The server sent more bytes than it announced (\(total)) for \(response.url.absoluteString)",
                        url: request.url,
                        hint: "The output holds the announced length and no more; try again"
                    )
                }
                for limiter in limiters { try await limiter.take(count) }
                buffer.withUnsafeReadableBytes { digest?.update($0) }
                do {
                    try await sink(buffer)
                } catch {
                    throw SinkFailure(underlying: error)
                }
                position += Int64(count)
                box.add(count)
                progress(box.snapshot())
            }
        } catch let failure as SinkFailure {
            throw failure.underlying
        } catch let error as HaulError where error.code != .connection {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw broken(error, after: position, of: total, url: response.url)
        }
        if let total, position < total {
            throw broken(nil, after: position, of: total, url: response.url)
        }
        if let checksum = request.checksum, let actual = digest?.finalizeHex(), actual != checksum.hex {
            throw HaulError(
                .checksumMismatch,
                "Checksum mismatch for \(response.url.absoluteString): expected \(checksum.algorithm.name) \(checksum.hex), got \(actual)",
                url: request.url,
                hint: "Every byte was already written to the output: discard it, and check the checksum or the URL"
            )
        }
        return StreamResult(
            finalURL: response.url,
            bytes: position,
            totalBytes: total,
            elapsed: environment.timeline.now - started
        )
    }

    /// The 200 to stream; until it comes, failures are retried as a download's are.
    private func open(progress: (DownloadProgress) -> Void) async throws -> HTTPTransport.Response {
        try await environment.retry.retrying(
            progress: box,
            logger: environment.logger,
            timeline: environment.timeline,
            announce: progress
        ) {
            let response = try await transport.get(
                request.url,
                headers: request.headers,
                range: nil,
                ifRange: nil,
                logger: environment.logger
            )
            guard response.status == 200 else { throw await HTTPTransport.failure(response, url: request.url) }
            return response
        }
    }

    /// The response's `Content-Length`, checked: digits only, one value.
    private func announcedLength(_ response: HTTPTransport.Response) throws -> Int64? {
        let values = response.headers["Content-Length"]
        guard let first = values.first else { return nil }
        guard Set(values).count == 1, first.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let length = Int64(first)
        else {
            throw HaulError(
                .invalidResponse,
                "The server sent an invalid Content-Length '\(values.joined(separator: ", "))' for \(response.url.absoluteString)",
                url: request.url
            )
        }
        return length
    }

    /// The error for a body that stopped before its end: a stream cannot resume, so it is
    /// final, and says how far it got.
    private func broken(_ error: (any Error)?, after position: Int64, of total: Int64?, url: URL) -> HaulError {
        // Short of the announced end, any break but a timeout is the connection closing
        // early (the parser's complaint about the end says less).
        let cause =
            if let error, total == nil || HTTPTransport.isTimeout(error) {
                transport.connectionError(error, url: url).message
            } else {
                "the connection closed early"
            }
        let amount = total.map { "\(position) of \($0) bytes" } ?? "\(position) bytes"
        return HaulError(
            .connection,
            "The stream from \(url.absoluteString) broke after \(amount): \(cause.continuingSentence)",
            url: request.url,
            hint: "A stream cannot be resumed: run the command again, or save to a file, which resumes"
        )
    }
}
