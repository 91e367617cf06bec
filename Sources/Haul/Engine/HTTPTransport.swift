import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

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

    /// Wraps a transport failure as a retryable ``HaulError`` saying what happened in words
    /// (timed out, closed, refused), never as a library type.
    func connectionError(_ error: any Error, url: URL) -> HaulError {
        if let error = error as? HaulError { return error }
        if let error = error as? HTTPClientError {
            switch error {
            case .readTimeout:
                return HaulError(
                    .connection,
                    "Timed out: the server sent nothing for \(readTimeout.spoken) (--timeout) while sending \(url.absoluteString)",
                    url: url
                )
            case .connectTimeout:
                return HaulError(
                    .connection,
                    "Timed out connecting to \(url.host ?? "the server") after \(connectTimeout.spoken) (--connect-timeout) for \(url.absoluteString)",
                    url: url
                )
            case .remoteConnectionClosed:
                return HaulError(
                    .connection,
                    "The server closed the connection early for \(url.absoluteString)",
                    url: url
                )
            default: break
            }
        }
        return HaulError(
            .connection,
            "Connection failed for \(url.absoluteString): \(HTTPTransport.describe(error))",
            url: url
        )
    }

    /// Whether a transport failure is a connect or read timeout.
    static func isTimeout(_ error: any Error) -> Bool {
        guard let error = error as? HTTPClientError else { return false }
        return error == .readTimeout || error == .connectTimeout
    }

    /// A network failure in words: the system's message for an errno, else the error's own
    /// description without module and type prefixes.
    static func describe(_ error: any Error) -> String {
        if let error = error as? IOError { return String(cString: strerror(error.errnoCode)) }
        if let error = error as? POSIXError { return String(cString: strerror(error.code.rawValue)) }
        if error is HTTPParserError { return "the server's response is not valid HTTP" }
        var text = String(describing: error)
        if let dot = text.firstIndex(of: "."), text[..<dot].allSatisfy({ $0.isLetter || $0.isNumber }) {
            text = String(text[text.index(after: dot)...])  // "HTTPClientError.x" → "x"
        }
        return text
    }
}
