import Foundation

/// Which proxy each request of a download goes through, with curl's rules.
///
/// A proxy for `http://` URLs, one for `https://` URLs, one for both when those are not
/// set, and the hosts that are reached directly. Every hop of a redirect chooses afresh,
/// so a redirect from a proxied host to a bypassed one (or back) goes the right way.
///
/// ```swift
/// var request = DownloadRequest(url: url, destination: .directory("/data"))
/// request.proxy = .fromEnvironment()                       // http_proxy, https_proxy, no_proxy…
/// request.proxy = ProxySettings(all: "http://proxy.corp:3128", noProxy: ["corp.example", "10.0.0.0/8"])
/// ```
///
/// Proxy URLs are `http://` (requests for `http://` URLs are forwarded in absolute form;
/// `https://` URLs are tunnelled with `CONNECT`), `socks5://` and `socks5h://` (both let the
/// proxy resolve the name). `user:password@` in a proxy URL authenticates to an HTTP proxy
/// (Basic). Without a scheme `http://` is meant, and without a port 1080, as in curl.
public struct ProxySettings: Sendable, Hashable, Codable {
    /// The proxy for `http://` URLs (curl's `http_proxy`).
    public var http: String?
    /// The proxy for `https://` URLs (`https_proxy`).
    public var https: String?
    /// The proxy for either when its own is not set (`all_proxy`).
    public var all: String?
    /// Hosts reached directly (`no_proxy`): `*` for every host, a domain (`example.com` or
    /// `.example.com`: itself and every name under it), an IP address, or a CIDR block
    /// (`10.0.0.0/8`, `fd00::/8`).
    public var noProxy: [String]

    public init(http: String? = nil, https: String? = nil, all: String? = nil, noProxy: [String] = []) {
        self.http = http
        self.https = https
        self.all = all
        self.noProxy = noProxy
    }

    private enum CodingKeys: String, CodingKey {
        case http, https, all, noProxy
    }

    /// Every field may be left out.
    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        http = try container.decodeIfPresent(String.self, forKey: .http)
        https = try container.decodeIfPresent(String.self, forKey: .https)
        all = try container.decodeIfPresent(String.self, forKey: .all)
        noProxy = try container.decodeIfPresent([String].self, forKey: .noProxy) ?? []
    }

    /// No proxy at all.
    public static let direct = ProxySettings()

    /// Whether every request goes directly.
    public var isDirect: Bool { http == nil && https == nil && all == nil }

    /// The settings the environment gives, as curl reads it: `http_proxy` (lower case only:
    /// `HTTP_PROXY` can be set by a web server's client, httpoxy), `https_proxy` or
    /// `HTTPS_PROXY`, `all_proxy` or `ALL_PROXY`, and `no_proxy` or `NO_PROXY` (a comma-
    /// separated list); the lower-case name wins when both are set. Empty values are unset.
    public static func fromEnvironment(
        _ environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> ProxySettings {
        func value(_ names: String...) -> String? {
            names.lazy.compactMap { environment[$0] }.first { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        }
        return ProxySettings(
            http: value("http_proxy"),
            https: value("https_proxy", "HTTPS_PROXY"),
            all: value("all_proxy", "ALL_PROXY"),
            noProxy: value("no_proxy", "NO_PROXY").map(ProxySettings.list) ?? []
        )
    }

    /// A comma-separated `no_proxy` list as its entries.
    public static func list(_ text: String) -> [String] {
        text.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
    }

    /// The longest proxy URL and the most `noProxy` entries taken.
    static let maxLength = 4096
    static let maxNoProxyEntries = 1024

    /// Checks that every proxy URL can be used and every `noProxy` entry is one of the forms.
    /// - Throws: ``HaulError/Code/invalidArgument`` naming the value (credentials hidden).
    package func validate() throws {
        for text in [http, https, all].compactMap({ $0 }) { _ = try ProxyEndpoint(parsing: text) }
        guard noProxy.count <= ProxySettings.maxNoProxyEntries else {
            throw HaulError(.invalidArgument, "The no-proxy list has more than 1024 entries")
        }
        for entry in noProxy {
            guard !entry.isEmpty, entry.utf8.count <= 255, entry.allSatisfy({ $0.isASCII && !$0.isWhitespace }),
                !entry.contains(","), NoProxyPattern(entry) != nil
            else {
                throw HaulError(
                    .invalidArgument,
                    "The no-proxy entry '\(entry.prefix(64))' is not a host, a domain, an IP address or a CIDR block",
                    hint: "Write entries such as example.com, .example.com, 10.1.2.3, 10.0.0.0/8 or *"
                )
            }
        }
    }

    /// The proxy a request for `url` goes through, or nil to go directly.
    /// - Throws: ``HaulError/Code/invalidArgument`` for a proxy URL that cannot be used.
    func endpoint(for url: URL) throws -> ProxyEndpoint? {
        guard !isDirect, let host = url.host?.lowercased() else { return nil }
        if bypasses(host: host) { return nil }
        let chosen = url.scheme?.lowercased() == "https" ? (https ?? all) : (http ?? all)
        return try chosen.map(ProxyEndpoint.init(parsing:))
    }

    /// Whether `no_proxy` sends requests for `host` directly.
    func bypasses(host: String) -> Bool {
        let host = host.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return noProxy.contains { NoProxyPattern($0)?.matches(host) ?? false }
    }
}

/// One proxy server as a request uses it.
struct ProxyEndpoint: Sendable, Hashable {
    enum Kind: Sendable, Hashable {
        /// An HTTP proxy: `http://` URLs forwarded in absolute form, `https://` tunnelled.
        case http
        /// A SOCKS5 proxy; the proxy resolves the target's name.
        case socks5
    }

    var kind: Kind
    var host: String
    var port: Int
    /// Basic credentials for an HTTP proxy.
    var username: String?
    var password: String?

    /// `host:port` for messages, never with credentials.
    var endpoint: String { NetworkFailure.endpoint(host: host, port: port) }

    /// The `Proxy-Authorization` value, when there are credentials.
    var authorization: String? {
        guard let username else { return nil }
        return "Basic " + Data("\(username):\(password ?? "")".utf8).base64EncodedString()
    }

    /// Parses a proxy as curl takes it: `[scheme://][user:password@]host[:port]`.
    init(parsing text: String) throws {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        func refuse(_ why: String, hint: String = "Write it as http://host:port or socks5h://host:port") -> HaulError {
            // Never the credentials: what follows the last '@' (or all of it) is shown.
            let shown = trimmed.split(separator: "@").last.map(String.init) ?? ""
            return HaulError(.invalidArgument, "The proxy '\(String(shown.prefix(200)))' \(why)", hint: hint)
        }
        guard !trimmed.isEmpty, trimmed.utf8.count <= ProxySettings.maxLength,
            !trimmed.unicodeScalars.contains(where: { $0.value < 0x20 || $0 == " " })
        else {
            throw refuse("is empty, too long, or holds spaces or control characters")
        }
        let full = trimmed.contains("://") ? trimmed : "http://" + trimmed
        guard let components = URLComponents(string: full), let scheme = components.scheme?.lowercased() else {
            throw refuse("is not a URL")
        }
        switch scheme {
        case "http": kind = .http
        case "socks5", "socks5h": kind = .socks5
        case "https":
            throw refuse(
                "uses TLS to the proxy itself (https://), which Haul does not speak",
                hint: "Give the proxy as http://host:port; https:// downloads through it stay encrypted end to end"
            )
        default:
            throw refuse("has the scheme '\(scheme)'; Haul speaks http://, socks5:// and socks5h:// proxies")
        }
        guard let host = components.host?.trimmingCharacters(in: CharacterSet(charactersIn: "[]")), !host.isEmpty
        else {
            throw refuse("has no host")
        }
        if let port = components.port, !(1...65535).contains(port) { throw refuse("has a port outside 1 to 65535") }
        if !(components.path.isEmpty || components.path == "/") || components.query != nil {
            throw refuse("has a path or a query; a proxy is a host and a port")
        }
        self.host = host
        self.port = components.port ?? 1080
        username = components.user.map { $0.removingPercentEncoding ?? $0 }
        password = components.password.map { $0.removingPercentEncoding ?? $0 }
        if kind == .socks5, username != nil {
            throw refuse(
                "has credentials, and Haul's SOCKS5 client does not authenticate",
                hint: "Use a SOCKS5 proxy without authentication, or an HTTP proxy with user:password@"
            )
        }
    }
}

/// One `no_proxy` entry, parsed.
struct NoProxyPattern {
    private enum Form {
        case everything
        case domain(String)
        case address([UInt8])
        case block([UInt8], bits: Int)
    }

    private let form: Form

    init?(_ text: String) {
        var entry = text.lowercased().trimmingCharacters(in: .whitespaces)
        if entry == "*" {
            form = .everything
            return
        }
        if let slash = entry.firstIndex(of: "/") {
            let address = entry[..<slash].trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
            guard let bytes = IPAddress.bytes(address), let bits = Int(entry[entry.index(after: slash)...]),
                (0...bytes.count * 8).contains(bits)
            else { return nil }
            form = .block(bytes, bits: bits)
            return
        }
        entry = entry.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        if let bytes = IPAddress.bytes(entry) {
            form = .address(bytes)
            return
        }
        while entry.hasPrefix(".") { entry.removeFirst() }
        guard !entry.isEmpty,
            entry.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "-" || $0 == "." || $0 == "_" })
        else { return nil }
        form = .domain(entry)
    }

    func matches(_ host: String) -> Bool {
        switch form {
        case .everything: return true
        case .domain(let domain): return host == domain || host.hasSuffix("." + domain)
        case .address(let bytes): return IPAddress.bytes(host) == bytes
        case .block(let network, let bits):
            guard let address = IPAddress.bytes(host), address.count == network.count else { return false }
            for bit in 0..<bits where (address[bit / 8] ^ network[bit / 8]) & (0x80 >> UInt8(bit % 8)) != 0 {
                return false
            }
            return true
        }
    }
}

/// IPv4 and IPv6 addresses as bytes.
enum IPAddress {
    /// The address's bytes (4 or 16), or nil when `text` is not an address.
    static func bytes(_ text: String) -> [UInt8]? {
        var v4 = in_addr()
        if inet_pton(AF_INET, text, &v4) == 1 {
            return withUnsafeBytes(of: &v4) { Array($0) }
        }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, text, &v6) == 1 {
            return withUnsafeBytes(of: &v6) { Array($0) }
        }
        return nil
    }
}
