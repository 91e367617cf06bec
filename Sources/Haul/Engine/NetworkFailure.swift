import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL

/// Why talking to a server failed below HTTP, in Haul's words: the name, the connection,
/// the TLS handshake or the proxy. Read from what the HTTP client and SwiftNIO throw, once,
/// in ``NetworkFailure/init(_:host:port:)``, so the rest of Haul never looks at library
/// error types.
public struct NetworkFailure: Sendable, Hashable {
    /// What went wrong.
    public enum Kind: String, Sendable, Hashable, CaseIterable {
        /// The name server says the host does not exist.
        case hostNotFound
        /// No name server answered (often: no network).
        case nameServerUnavailable
        /// Nothing accepts connections on that port.
        case connectionRefused
        /// There is no route to the network or the host.
        case unreachable
        /// No connection within the connect timeout.
        case connectTimeout
        /// The server sent nothing for the read timeout.
        case readTimeout
        /// The server (or something between) reset the connection.
        case connectionReset
        /// The server closed the connection before the response was complete.
        case closedEarly
        /// The server's certificate is not signed by a trusted authority, or has expired.
        case certificateUntrusted
        /// The server's certificate is for another name.
        case certificateNameMismatch
        /// The TLS handshake failed for another reason (a protocol mismatch, say).
        case tlsHandshake
        /// The proxy refused to carry the request (it answered `CONNECT` with an error).
        case proxyFailed
        /// The proxy wants credentials it was not given, or refused the ones it was given.
        case proxyAuthenticationRequired
        /// Anything else.
        case other
    }

    /// What went wrong.
    public var kind: Kind
    /// The server (or proxy) as `host:port`.
    public var endpoint: String
    /// More detail in words, when there is some (the system's message, the TLS reason).
    public var detail: String?

    /// Whether trying again later can succeed: refused, reset, unreachable, timeouts and a
    /// silent name server are; a name that does not exist and a certificate not trusted are not.
    public var isTransient: Bool {
        switch kind {
        case .hostNotFound, .certificateUntrusted, .certificateNameMismatch, .tlsHandshake,
            .proxyAuthenticationRequired, .proxyFailed:
            false
        case .nameServerUnavailable, .connectionRefused, .unreachable, .connectTimeout, .readTimeout,
            .connectionReset, .closedEarly, .other:
            true
        }
    }

    /// Whether the failure says this machine has no usable route: waiting for the network
    /// is the answer, not spending retries.
    public var isNoRoute: Bool {
        kind == .unreachable || kind == .nameServerUnavailable
    }

    public init(kind: Kind, endpoint: String, detail: String? = nil) {
        self.kind = kind
        self.endpoint = endpoint
        self.detail = detail
    }

    /// Reads an error from the HTTP client or SwiftNIO; nil for errors that are not about the
    /// network (a ``HaulError``, a cancellation).
    init?(_ error: any Error, host: String, port: Int) {
        let endpoint = NetworkFailure.endpoint(host: host, port: port)
        if error is HaulError || error is CancellationError { return nil }
        if let error = error as? NIOConnectionError {
            // Happy eyeballs: the lookups' errors, else the first connection error.
            if let dns = error.dnsAError ?? error.dnsAAAAError {
                self = NetworkFailure(dns, host: host, port: port) ?? NetworkFailure(kind: .other, endpoint: endpoint)
                return
            }
            if let first = error.connectionErrors.first {
                self =
                    NetworkFailure(first.error, host: host, port: port)
                    ?? NetworkFailure(kind: .other, endpoint: endpoint)
                return
            }
            self.init(kind: .other, endpoint: endpoint)
            return
        }
        if let error = error as? SocketAddressError.UnknownHost {
            // EAI_AGAIN: the name server did not answer, which is what having no network
            // looks like; anything else (EAI_NONAME) is a name that does not exist.
            let kind: Kind = Int32(error.errorCode) == EAI_AGAIN ? .nameServerUnavailable : .hostNotFound
            self.init(kind: kind, endpoint: endpoint, detail: error.errorDescription)
            return
        }
        if let error = error as? IOError {
            self.init(errno: error.errnoCode, endpoint: endpoint)
            return
        }
        if let error = error as? POSIXError {
            self.init(errno: error.code.rawValue, endpoint: endpoint)
            return
        }
        if let failure = NetworkFailure.channelOrTLS(error, endpoint: endpoint)
            ?? NetworkFailure.client(error, endpoint: endpoint)
        {
            self = failure
            return
        }
        if error is HTTPParserError {
            self.init(kind: .other, endpoint: endpoint, detail: "the response is not valid HTTP")
            return
        }
        self.init(kind: .other, endpoint: endpoint, detail: NetworkFailure.words(error))
    }

    /// A SwiftNIO channel's or TLS's error as a failure; nil for another error.
    private static func channelOrTLS(_ error: any Error, endpoint: String) -> NetworkFailure? {
        if let error = error as? ChannelError {
            switch error {
            case .connectTimeout: return NetworkFailure(kind: .connectTimeout, endpoint: endpoint)
            case .eof, .ioOnClosedChannel, .alreadyClosed, .outputClosed:
                return NetworkFailure(kind: .closedEarly, endpoint: endpoint)
            default: return NetworkFailure(kind: .other, endpoint: endpoint, detail: "\(error)")
            }
        }
        if let error = error as? NIOSSLExtraError {
            if error == .failedToValidateHostname || error == .serverHostnameImpossibleToMatch {
                return NetworkFailure(kind: .certificateNameMismatch, endpoint: endpoint)
            } else {
                return NetworkFailure(kind: .tlsHandshake, endpoint: endpoint, detail: NetworkFailure.words(error))
            }
        }
        if let error = error as? NIOSSLError {
            switch error {
            case .handshakeFailed(let reason):
                let text = "\(reason)"
                if text.contains("CERTIFICATE_VERIFY_FAILED") {
                    return NetworkFailure(kind: .certificateUntrusted, endpoint: endpoint)
                } else {
                    return NetworkFailure(
                        kind: .tlsHandshake,
                        endpoint: endpoint,
                        detail: NetworkFailure.boringSSLReason(text)
                    )
                }
            case .uncleanShutdown:
                return NetworkFailure(kind: .closedEarly, endpoint: endpoint)
            default:
                return NetworkFailure(kind: .tlsHandshake, endpoint: endpoint, detail: NetworkFailure.words(error))
            }
        }
        return nil
    }

    /// The HTTP client's error as a failure; nil for another error.
    private static func client(_ error: any Error, endpoint: String) -> NetworkFailure? {
        if let error = error as? HTTPClientError {
            switch error {
            case .connectTimeout, .tlsHandshakeTimeout, .httpProxyHandshakeTimeout, .socksHandshakeTimeout:
                return NetworkFailure(kind: .connectTimeout, endpoint: endpoint)
            case .readTimeout: return NetworkFailure(kind: .readTimeout, endpoint: endpoint)
            case .remoteConnectionClosed: return NetworkFailure(kind: .closedEarly, endpoint: endpoint)
            case .proxyAuthenticationRequired:
                return NetworkFailure(kind: .proxyAuthenticationRequired, endpoint: endpoint)
            case .invalidProxyResponse:
                return NetworkFailure(kind: .proxyFailed, endpoint: endpoint, detail: NetworkFailure.words(error))
            default: return NetworkFailure(kind: .other, endpoint: endpoint, detail: NetworkFailure.words(error))
            }
        }
        return nil
    }

    private init(errno code: Int32, endpoint: String) {
        let detail = String(cString: strerror(code))
        switch code {
        case ECONNREFUSED: self.init(kind: .connectionRefused, endpoint: endpoint)
        case ENETUNREACH, EHOSTUNREACH, ENETDOWN, EHOSTDOWN, EADDRNOTAVAIL:
            self.init(kind: .unreachable, endpoint: endpoint, detail: detail)
        case ETIMEDOUT: self.init(kind: .connectTimeout, endpoint: endpoint)
        case ECONNRESET, EPIPE, ECONNABORTED: self.init(kind: .connectionReset, endpoint: endpoint)
        default: self.init(kind: .other, endpoint: endpoint, detail: detail)
        }
    }

    /// `host:port`, with brackets around an IPv6 address.
    static func endpoint(host: String, port: Int) -> String {
        host.contains(":") && !host.hasPrefix("[") ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// An error's own words without module and type prefixes.
    static func words(_ error: any Error) -> String {
        var text = String(describing: error)
        if let dot = text.firstIndex(of: "."), text[..<dot].allSatisfy({ $0.isLetter || $0.isNumber }) {
            text = String(text[text.index(after: dot)...])  // "HTTPClientError.x" → "x"
        }
        return text
    }

    /// BoringSSL's reason (`WRONG_VERSION_NUMBER`) out of its error list, which also holds
    /// the library's source paths: those are never shown.
    static func boringSSLReason(_ text: String) -> String {
        let reasons = text.split(whereSeparator: { !($0.isUppercase || $0 == "_" || $0.isNumber) })
            .filter { $0.count >= 6 && $0.contains("_") }
        guard let reason = reasons.first else { return "the handshake failed" }
        return reason.lowercased().replacingOccurrences(of: "_", with: " ")
    }
}

extension NetworkFailure {
    /// One sentence naming the server and what happened.
    func message(connectTimeout: Duration, readTimeout: Duration) -> String {
        switch kind {
        case .hostNotFound: "The host \(host) does not exist: the name server has no address for it"
        case .nameServerUnavailable: "Cannot look up \(host): no name server answered"
        case .connectionRefused: "Connection refused by \(endpoint)"
        case .unreachable: "No route to \(endpoint)" + (detail.map { ": \($0.lowercased())" } ?? "")
        case .connectTimeout: "Timed out connecting to \(endpoint) after \(connectTimeout.spoken) (--connect-timeout)"
        case .readTimeout: "Timed out: \(endpoint) sent nothing for \(readTimeout.spoken) (--timeout)"
        case .connectionReset: "Connection reset by \(endpoint)"
        case .closedEarly: "\(endpoint) closed the connection early"
        case .certificateUntrusted:
            "The certificate of \(endpoint) is not trusted: no trusted authority signed it, or it has expired"
        case .certificateNameMismatch: "The certificate of \(endpoint) is for another name than \(host)"
        case .tlsHandshake: "The TLS handshake with \(endpoint) failed: \(detail ?? "no reason given")"
        case .proxyFailed: "The proxy failed the connection to \(endpoint)" + (detail.map { ": \($0)" } ?? "")
        case .proxyAuthenticationRequired: "The proxy refused to connect to \(endpoint) without valid credentials"
        case .other: "Connection to \(endpoint) failed" + (detail.map { ": \($0)" } ?? "")
        }
    }

    /// What the user can do, when there is something.
    var hint: String? {
        switch kind {
        case .hostNotFound: "Check the host name in the URL"
        case .connectionRefused: "Check the URL's port, and that the server is running"
        case .certificateNameMismatch:
            "Use a name the certificate is for in the URL; --insecure skips the check"
        case .certificateUntrusted:
            "If the server uses a private authority, give its certificate with --cacert FILE (or SSL_CERT_FILE); --insecure skips the check"
        case .tlsHandshake: "Check that the URL's scheme and port are right (https on a port that speaks TLS)"
        case .proxyFailed: "Check the proxy (--proxy, http_proxy, https_proxy) and that it allows this host"
        case .proxyAuthenticationRequired:
            "Give the proxy's credentials in its URL (--proxy http://user:password@host:port)"
        case .nameServerUnavailable, .unreachable: "Check the network connection"
        case .connectTimeout, .readTimeout, .connectionReset, .closedEarly, .other: nil
        }
    }

    /// The host part of ``endpoint``.
    var host: String {
        guard let colon = endpoint.lastIndex(of: ":") else { return endpoint }
        let host = endpoint[..<colon]
        return host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : String(host)
    }
}
