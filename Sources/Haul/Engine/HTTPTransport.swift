import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// Sends GET requests through AsyncHTTPClient and follows redirects itself, so that every
/// hop is checked: at most `maxRedirects`, only to http(s), credentials dropped when the
/// host changes, and the proxy chosen afresh for each hop's URL.
struct HTTPTransport: Sendable {
    let clients: ClientPool
    let maxRedirects: Int
    let userAgent: String
    /// The timeouts the client was built with, to say them in errors.
    var connectTimeout: Duration = .seconds(30)
    var readTimeout: Duration = .seconds(60)
    /// The task's TLS options, read into a configuration at its first https hop; the client's
    /// default (the system's authorities, every certificate checked) when they are the defaults.
    var tls = TLSSource(TLSOptions())
    /// The task's proxies; direct by default.
    var proxies = ProxySettings.direct
    /// The user and password for the URL's own host (the URL's userinfo wins).
    var credentials = Credentials.none
    /// Credentials per host, from the task's netrc file.
    var netrc: Netrc?
    /// The download's cookies; nil when they are off.
    var cookies: CookieJar?

    struct Response: Sendable {
        var head: HTTPClientResponse
        var url: URL
        /// The proxy the response came through, if any.
        var proxy: ProxyEndpoint?
        /// Where its body is read, when Haul's pipe reads it (``WritePlacement``).
        var site: ReadSite?
        var status: Int { Int(head.status.code) }
        var headers: HTTPHeaders { head.headers }
    }

    /// Whether a header carries credentials for the host it was given for (`Authorization`,
    /// `Cookie`, `Proxy-Authorization`): never sent on to another host, by a redirect or by
    /// a followed Metalink.
    static func carriesCredentials(_ header: HTTPHeaderField) -> Bool {
        ["authorization", "cookie", "proxy-authorization"].contains(header.name.lowercased())
    }

    /// Statuses that redirect a GET.
    private static let redirectStatuses: Set<Int> = [301, 302, 303, 307, 308]

    /// GETs `url`, following redirects (at most ``maxRedirects``, only to http and https;
    /// credentials given for one host are not sent on to another), and returns the first
    /// answer that is not a redirect, its body still to read.
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
        let origin = HTTPTransport.origin(url)
        while true {
            let request = try await request(
                current,
                headers: extra,
                range: range,
                ifRange: ifRange,
                sameOrigin: HTTPTransport.origin(current) == origin
            )
            let proxy = try proxies.endpoint(for: current)
            logger.debug(
                "GET",
                metadata: [
                    "url": "\(Redaction.url(current))", "range": "\(range ?? "-")",
                    "proxy": "\(proxy?.endpoint ?? "none")",
                ]
            )
            let (head, site) = try await send(request, to: current, through: proxy, logger: logger)
            cookies?.receive(head.headers["Set-Cookie"], from: current)
            let status = Int(head.status.code)
            if status == 407, let proxy {
                await HTTPTransport.discard(head.body)
                throw HTTPTransport.proxyError(.proxyAuthenticationRequired, proxy: proxy, url: current)
            }
            guard HTTPTransport.redirectStatuses.contains(status), let location = head.headers.first(name: "Location")
            else {
                return Response(head: head, url: current, proxy: proxy, site: site)
            }
            await HTTPTransport.discard(head.body)
            hops += 1
            let next = try redirect(from: current, to: location, hops: hops, startingAt: url)
            if next.host?.lowercased() != current.host?.lowercased() || next.port != current.port {
                extra.removeAll(where: HTTPTransport.carriesCredentials)
            }
            logger.debug("redirect", metadata: ["status": "\(status)", "to": "\(Redaction.url(next))"])
            current = next
        }
    }

    /// The GET of `url` with the caller's headers, except those Haul owns (ranges count
    /// encoded bytes, so identity is required: rule 2), its credentials and cookies.
    private func request(
        _ url: URL,
        headers extra: [HTTPHeaderField],
        range: String?,
        ifRange: String?,
        sameOrigin: Bool
    ) async throws -> HTTPClientRequest {
        var request = HTTPClientRequest(url: HTTPTransport.withoutCredentials(url).absoluteString)
        request.method = .GET
        if url.scheme?.lowercased() == "https" { request.tlsConfiguration = try await tls.configuration() }
        request.headers.add(name: "User-Agent", value: userAgent)
        request.headers.add(name: "Accept", value: "*/*")
        for field in extra {
            let lowered = field.name.lowercased()
            if ["range", "if-range", "accept-encoding", "host"].contains(lowered) { continue }
            if lowered == "user-agent" { request.headers.remove(name: "User-Agent") }
            if lowered == "accept" { request.headers.remove(name: "Accept") }
            request.headers.add(name: field.name, value: field.value)
        }
        request.headers.replaceOrAdd(name: "Accept-Encoding", value: "identity")
        if !request.headers.contains(name: "Authorization"),
            let authorization = authorization(for: url, sameOrigin: sameOrigin)
        {
            request.headers.add(name: "Authorization", value: authorization)
        }
        if let jar = cookies?.header(for: url) {
            let given = request.headers["Cookie"].joined(separator: "; ")
            request.headers.replaceOrAdd(name: "Cookie", value: given.isEmpty ? jar : given + "; " + jar)
        }
        if let range { request.headers.add(name: "Range", value: range) }
        if let ifRange { request.headers.add(name: "If-Range", value: ifRange) }
        return request
    }

    /// Sends `request` for `url`, through `proxy` if any (an HTTP proxy forwards plain
    /// http; anything else tunnels), and returns the answer's head and where its body is read.
    private func send(
        _ request: HTTPClientRequest,
        to url: URL,
        through proxy: ProxyEndpoint?,
        logger: Logger
    ) async throws -> (HTTPClientResponse, ReadSite?) {
        do {
            if let proxy, proxy.kind == .http, url.scheme?.lowercased() == "http" {
                let head = try await ProxyForwarding.get(
                    url,
                    headers: request.headers,
                    through: proxy,
                    connectTimeout: connectTimeout,
                    readTimeout: readTimeout
                )
                return (head, nil)
            }
            return try await BodyDelegate.execute(
                request,
                on: clients.client(through: proxy),
                logger: HTTPTransport.clientLogger(logger)
            )
        } catch {
            throw connectionError(error, url: url, proxy: proxy)
        }
    }

    /// The logger AsyncHTTPClient is given: Haul's own at `trace`, and below that one that
    /// drops everything, so `-v` and `--log-level debug` show Haul's requests and decisions,
    /// not a library's internals (its connections and event loops,
    /// `ahc-el=SelectableEventLoop {…}`). The client logs only at debug and trace, so it says
    /// nothing either way; but it sets its request's and connection's ids on the logger it is
    /// given for every request, and Haul's `StreamLogHandler` formats all of its metadata
    /// again at each change (a hundredth of the daemon's CPU for a burst of 1 KiB files).
    static func clientLogger(_ logger: Logger) -> Logger {
        logger.logLevel > .trace ? silentClientLogger : logger
    }

    private static let silentClientLogger = Logger(label: "haul.http-client") { _ in SwiftLogNoOpLogHandler() }

    /// Where the redirect from `current` to `location` leads, when it may be followed: the
    /// `hops`-th of a GET of `start`.
    private func redirect(from current: URL, to location: String, hops: Int, startingAt start: URL) throws -> URL {
        guard hops <= maxRedirects else {
            throw HaulError(
                .tooManyRedirects,
                "More than \(maxRedirects) redirects starting at \(start.absoluteString)",
                url: start
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
                url: start
            )
        }
        return next
    }

    /// This transport with a download's TLS options, proxies, credentials and cookies. The
    /// files they name (netrc, cookie jar) are read now, on the file threads (``FileIO``), so a
    /// daemon sees them as they are at each start.
    func configured(
        tls: TLSOptions,
        proxy: ProxySettings,
        credentials: Credentials,
        cookies: CookieOptions,
        url: URL
    ) async throws -> HTTPTransport {
        var transport = self
        transport.tls = TLSSource(tls)
        transport.proxies = proxy
        transport.credentials = credentials
        // Most downloads name neither file: no hop to a file thread for nothing (a jar kept in
        // memory, from a `Cookie` header at most, reads no file).
        guard credentials.netrcFile != nil || (cookies.enabled && cookies.load != nil) else {
            transport.cookies = cookies.enabled ? try CookieJar.starting(with: cookies, url: url) : nil
            return transport
        }
        let (netrc, jar) = try await FileIO.run {
            (
                try credentials.netrcFile.map { try Netrc(file: $0) },
                cookies.enabled ? try CookieJar.starting(with: cookies, url: url) : nil
            )
        }
        transport.netrc = netrc
        transport.cookies = jar
        return transport
    }

    /// Writes the cookies the download ends with to its cookie jar file, if it has one. A
    /// jar that cannot be written is logged, and does not undo the download.
    func saveCookies(to path: String?, logger: Logger) async {
        guard let path, let jar = cookies else { return }
        do {
            try await FileIO.run { try jar.save(to: path) }
        } catch {
            logger.warning("the cookie jar was not saved", metadata: ["error": "\(error)"])
        }
    }

    /// Basic credentials for a request to `url`: the URL's own user and password, or the
    /// request's, for the first host only; else the netrc file's entry for the host.
    func authorization(for url: URL, sameOrigin: Bool) -> String? {
        if sameOrigin {
            if let user = url.user(percentEncoded: false), !user.isEmpty {
                return Credentials.basic(user: user, password: url.password(percentEncoded: false) ?? "")
            }
            if let user = credentials.user {
                return Credentials.basic(user: user, password: credentials.password ?? "")
            }
        }
        if let host = url.host, let entry = netrc?.entry(for: host), let login = entry.login {
            return Credentials.basic(user: login, password: entry.password ?? "")
        }
        return nil
    }

    /// The host and port (the scheme's default when none is given) that credentials from the
    /// URL or the request belong to: a redirect to another host or port, or from http to
    /// https (port 80 to 443), does not carry them.
    static func origin(_ url: URL) -> String {
        let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
        return "\(url.host?.lowercased() ?? ""):\(port)"
    }

    /// `url` without `user:password@`: credentials go in a header, never on the wire in the URL.
    static func withoutCredentials(_ url: URL) -> URL {
        guard url.user != nil || url.password != nil,
            var components = URLComponents(url: url, resolvingAgainstBaseURL: true)
        else { return url }
        components.user = nil
        components.password = nil
        return components.url ?? url
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
        var error = HaulError.httpStatus(
            response.status,
            reason: response.head.status.reasonPhrase,
            url: response.url,
            retryAfter: RetryPolicy.parseRetryAfter(response.headers.first(name: "Retry-After"))
        )
        if response.status == 401, let proxy = response.proxy {
            // Some proxies (tinyproxy) answer wrong credentials with 401 rather than 407.
            error.hint =
                "Check the URL's credentials, and the proxy's (USER:PASSWORD before the host in --proxy): the proxy \(proxy.endpoint) may have answered"
        }
        return error
    }

    /// Wraps a transport failure as a ``HaulError`` saying what happened in words (the
    /// host, the cause, what to do), never as a library type; retryable only when trying
    /// again can help (``NetworkFailure/isTransient``).
    func connectionError(_ error: any Error, url: URL, proxy: ProxyEndpoint? = nil) -> HaulError {
        if let error = error as? HaulError { return error }
        let host = url.host ?? "the server"
        let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
        let failure = NetworkFailure(error, host: host, port: port)
        if let proxy, let reaching = NetworkFailure(error, host: proxy.host, port: proxy.port) {
            switch reaching.kind {
            case .hostNotFound, .nameServerUnavailable, .connectionRefused, .unreachable, .connectTimeout:
                // The connection that failed is the one to the proxy.
                var error = connectionError(error, url: url)
                let reason = reaching.message(connectTimeout: connectTimeout, readTimeout: readTimeout)
                error.message = "The proxy failed: " + reason.continuingSentence
                error.hint = "Check the proxy (--proxy, http_proxy, https_proxy) and that it runs"
                error.network = reaching
                return error
            case .proxyAuthenticationRequired, .proxyFailed:
                return HTTPTransport.proxyError(reaching.kind, proxy: proxy, url: url)
            default: break
            }
        }
        guard let failure else {
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

    /// A proxy that refused to carry the request, or wants credentials it was not given.
    static func proxyError(_ kind: NetworkFailure.Kind, proxy: ProxyEndpoint, url: URL) -> HaulError {
        let wantsCredentials = kind == .proxyAuthenticationRequired
        var error = HaulError(
            .proxy,
            wantsCredentials
                ? "The proxy \(proxy.endpoint) refused the request for \(url.host ?? "the server"): it wants valid credentials (HTTP 407)"
                : "The proxy \(proxy.endpoint) refused to connect to \(url.host ?? "the server") (it answered CONNECT with an error)",
            url: url,
            hint: wantsCredentials
                ? "Give the proxy's user name and password: USER:PASSWORD before the host in --proxy or http_proxy"
                : "Check that the proxy allows this host and port, or bypass it with --noproxy"
        )
        error.network = NetworkFailure(kind: kind, endpoint: proxy.endpoint)
        return error
    }

    /// Whether a transport failure is a connect or read timeout.
    static func isTimeout(_ error: any Error) -> Bool {
        guard let error = error as? HTTPClientError else { return false }
        return error == .readTimeout || error == .connectTimeout
    }
}
