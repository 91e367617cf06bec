import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL

/// Sends GET requests through AsyncHTTPClient and follows redirects itself, so that every
/// hop is checked: at most `maxRedirects`, only to http(s), credentials dropped when the
/// host changes.
struct HTTPTransport: Sendable {
    let client: HTTPClient
    let maxRedirects: Int
    let userAgent: String
    /// The timeouts the client was built with, to say them in errors.
    var connectTimeout: Duration = .seconds(30)
    var readTimeout: Duration = .seconds(60)
    /// The TLS configuration for https hops, from the task's ``TLSOptions``; nil for the
    /// client's default (the system's authorities, every certificate checked).
    var tls: TLSConfiguration?

    struct Response: Sendable {
        var head: HTTPClientResponse
        var url: URL
        var status: Int { Int(head.status.code) }
        var headers: HTTPHeaders { head.headers }
    }

    /// Statuses that redirect a GET.
    private static let redirectStatuses: Set<Int> = [301, 302, 303, 307, 308]

    func get(
        _ url: URL,
        headers extra: [HTTPHeaderField],
        range: String?,
        ifRange: String?,
        logger: Logger
    )
        async throws -> Response
    {
        var current = url
        var extra = extra
        var hops = 0
        while true {
            var request = HTTPClientRequest(url: current.absoluteString)
            request.method = .GET
            if current.scheme?.lowercased() == "https" { request.tlsConfiguration = tls }
            request.headers.add(name: "User-Agent", value: userAgent)
            request.headers.add(name: "Accept", value: "*/*")
            for field in extra {
                // Haul owns these: ranges count encoded bytes, so identity is required (rule 2).
                let lowered = field.name.lowercased()
                if ["range", "if-range", "accept-encoding", "host"].contains(lowered) { continue }
                if lowered == "user-agent" { request.headers.remove(name: "User-Agent") }
                if lowered == "accept" { request.headers.remove(name: "Accept") }
                request.headers.add(name: field.name, value: field.value)
            }
            request.headers.replaceOrAdd(name: "Accept-Encoding", value: "identity")
            if let range { request.headers.add(name: "Range", value: range) }
            if let ifRange { request.headers.add(name: "If-Range", value: ifRange) }

            logger.debug("GET", metadata: ["url": "\(Redaction.url(current))", "range": "\(range ?? "-")"])
            let head: HTTPClientResponse
            do {
                head = try await client.execute(request, deadline: .distantFuture, logger: logger)
            } catch {
                throw connectionError(error, url: current)
            }
            let status = Int(head.status.code)
            guard HTTPTransport.redirectStatuses.contains(status), let location = head.headers.first(name: "Location")
            else {
                return Response(head: head, url: current)
            }
            await HTTPTransport.discard(head.body)
            hops += 1
            guard hops <= maxRedirects else {
                throw HaulError(
                    .tooManyRedirects,
                    "More than \(maxRedirects) redirects starting at \(url.absoluteString)",
                    url: url
                )
            }
            guard let next = URL(string: location, relativeTo: current)?.absoluteURL else {
                throw HaulError(.invalidResponse, "Redirect to an invalid location '\(location)'", url: current)
            }
            let scheme = next.scheme?.lowercased()
            guard scheme == "http" || scheme == "https", next.host?.isEmpty == false else {
                throw HaulError(
                    .unsupportedRedirect,
                    "Refusing redirect from \(current.absoluteString) to \(next.absoluteString): only http and https are followed",
                    url: url
                )
            }
            if next.host?.lowercased() != current.host?.lowercased() || next.port != current.port {
                extra.removeAll { ["authorization", "cookie", "proxy-authorization"].contains($0.name.lowercased()) }
            }
            logger.debug("redirect", metadata: ["status": "\(status)", "to": "\(Redaction.url(next))"])
            current = next
        }
    }

    /// Reads and drops a small body (a redirect's), so the connection can be reused; gives up
    /// on the connection instead of reading a large one.
    static func discard(_ body: HTTPClientResponse.Body) async {
        var seen = 0
        do {
            for try await chunk in body {
                seen += chunk.readableBytes
                if seen > 1 << 20 { break }
            }
        } catch {}
    }

    /// The error for a response that is neither the content nor a redirect: an HTTP error
    /// status (retryable or not, with `Retry-After`), or a 2xx Haul cannot use. Drops its body.
    static func failure(_ response: Response, url: URL) async -> HaulError {
        await discard(response.head.body)
        if (200..<300).contains(response.status) {
            return HaulError(
                .invalidResponse,
                "Unexpected HTTP \(response.status) for \(response.url.absoluteString)",
                url: url,
                status: response.status
            )
        }
        return HaulError.httpStatus(
            response.status,
            reason: response.head.status.reasonPhrase,
            url: response.url,
            retryAfter: RetryPolicy.parseRetryAfter(response.headers.first(name: "Retry-After"))
        )
    }

    /// Wraps a transport failure as a ``HaulError`` saying what happened in words (the
    /// host, the cause, what to do), never as a library type; retryable only when trying
    /// again can help (``NetworkFailure/isTransient``).
    func connectionError(_ error: any Error, url: URL) -> HaulError {
        if let error = error as? HaulError { return error }
        let host = url.host ?? "the server"
        let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
        guard let failure = NetworkFailure(error, host: host, port: port) else {
            return HaulError(.connection, "Connection failed for \(url.absoluteString)", url: url)
        }
        let code: HaulError.Code
        switch failure.kind {
        case .hostNotFound: code = .hostNotFound
        case .certificateUntrusted, .certificateNameMismatch, .tlsHandshake: code = .tls
        case .proxyFailed, .proxyAuthenticationRequired: code = .proxy
        default: code = .connection
        }
        var haulError = HaulError(
            code,
            failure.message(connectTimeout: connectTimeout, readTimeout: readTimeout),
            url: url,
            hint: failure.hint
        )
        haulError.network = failure
        return haulError
    }

    /// Whether a transport failure is a connect or read timeout.
    static func isTimeout(_ error: any Error) -> Bool {
        guard let error = error as? HTTPClientError else { return false }
        return error == .readTimeout || error == .connectTimeout
    }
}
