import Foundation
import Synchronization

/// What a download does with cookies.
///
/// Cookies a server sets are kept for the download's own requests — across its redirects
/// and all its connections — and sent back where they belong (RFC 6265: domain, path,
/// `Secure`, expiry), as wget and aria2 do by default. A file of cookies in the Netscape
/// format curl, wget and aria2 share can be loaded first (curl's `-b`), and the cookies
/// the download ends with saved to one (`-c`).
public struct CookieOptions: Sendable, Hashable, Codable {
    /// Whether cookies set by the servers are kept and sent back during the download.
    public var enabled: Bool
    /// A Netscape-format cookie file to start from (read whenever the download starts).
    public var load: String?
    /// Cookies to start from as `name=value; name2=value2`, for the URL's host.
    public var header: String?
    /// A file to write the cookies to when the download ends (Netscape format, mode 0600).
    public var save: String?

    public init(enabled: Bool = true, load: String? = nil, header: String? = nil, save: String? = nil) {
        self.enabled = enabled
        self.load = load
        self.header = header
        self.save = save
    }

    private enum CodingKeys: String, CodingKey {
        case enabled, load, header, save
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        enabled = try container.decodeIfPresent(Bool.self, forKey: .enabled) ?? true
        load = try container.decodeIfPresent(String.self, forKey: .load)
        header = try container.decodeIfPresent(String.self, forKey: .header)
        save = try container.decodeIfPresent(String.self, forKey: .save)
    }

    /// Kept in memory for the download, no files.
    public static let standard = CookieOptions()

    func validate() throws {
        for (what, path) in [("cookie file (-b)", load), ("cookie jar (-c)", save)] {
            guard let path else { continue }
            guard path.hasPrefix("/"), path.utf8.count <= TLSOptions.maxPathLength, !path.contains("\0") else {
                throw HaulError(.invalidArgument, "The \(what) must be an absolute path without NUL")
            }
        }
        if let header {
            guard header.utf8.count <= 16384, !header.unicodeScalars.contains(where: { $0.value < 0x20 && $0 != "\t" })
            else {
                throw HaulError(.invalidArgument, "The cookies given (-b) hold a line break or more than 16 KiB")
            }
        }
    }
}

/// The cookies of one download: shared by its connections, consulted on every hop.
final class CookieJar: Sendable {
    struct Cookie: Sendable, Equatable {
        var name: String
        var value: String
        /// Lower case, without a leading dot.
        var domain: String
        /// Only for exactly `domain` (no `Domain` attribute was given).
        var hostOnly: Bool
        var path: String
        var secure: Bool
        var httpOnly: Bool
        /// nil: until the end of the download (a session cookie).
        var expires: Date?
    }

    private let cookies = Mutex<[Cookie]>([])
    /// The most cookies kept: a server cannot grow the jar without bound.
    static let maxCookies = 3000

    init(_ initial: [Cookie] = []) {
        cookies.withLock { $0 = initial }
    }

    var all: [Cookie] { cookies.withLock { $0 } }

    /// Takes the `Set-Cookie` fields of a response for `url`.
    func receive(_ fields: [String], from url: URL, now: Date = Date()) {
        guard let host = url.host?.lowercased(), !fields.isEmpty else { return }
        let parsed = fields.compactMap { CookieJar.parse($0, host: host, requestPath: url.path, now: now) }
        guard !parsed.isEmpty else { return }
        cookies.withLock { jar in
            for cookie in parsed {
                jar.removeAll { $0.name == cookie.name && $0.domain == cookie.domain && $0.path == cookie.path }
                if cookie.expires.map({ $0 > now }) ?? true { jar.append(cookie) }
            }
            if jar.count > CookieJar.maxCookies { jar.removeFirst(jar.count - CookieJar.maxCookies) }
        }
    }

    /// The `Cookie` value for a request to `url`, or nil when none applies: longer paths first.
    func header(for url: URL, now: Date = Date()) -> String? {
        guard let host = url.host?.lowercased() else { return nil }
        let https = url.scheme?.lowercased() == "https"
        let path = url.path.isEmpty ? "/" : url.path
        let matching = cookies.withLock { jar in
            jar.filter { cookie in
                (cookie.expires.map { $0 > now } ?? true) && (!cookie.secure || https)
                    && (cookie.hostOnly ? host == cookie.domain : CookieJar.domainMatches(host, cookie.domain))
                    && CookieJar.pathMatches(path, cookie.path)
            }
        }
        guard !matching.isEmpty else { return nil }
        return matching.sorted { $0.path.count > $1.path.count }.map { "\($0.name)=\($0.value)" }.joined(
            separator: "; "
        )
    }

    // MARK: Set-Cookie (RFC 6265 §5.2)

    static func parse(_ field: String, host: String, requestPath: String, now: Date) -> Cookie? {
        let parts = field.split(separator: ";", omittingEmptySubsequences: false)
        guard let pair = parts.first, let equals = pair.firstIndex(of: "=") else { return nil }
        let name = pair[..<equals].trimmingCharacters(in: .whitespaces)
        let value = pair[pair.index(after: equals)...].trimmingCharacters(in: .whitespaces)
        guard !name.isEmpty, name.utf8.count + value.utf8.count <= 4096,
            !(name + value).unicodeScalars.contains(where: { $0.value < 0x20 || $0 == ";" })
        else { return nil }
        var cookie = Cookie(
            name: name,
            value: value,
            domain: host,
            hostOnly: true,
            path: defaultPath(requestPath),
            secure: false,
            httpOnly: false,
            expires: nil
        )
        var maxAge: Int?
        for attribute in parts.dropFirst() {
            let pieces = attribute.split(separator: "=", maxSplits: 1)
            let key = pieces.first?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
            let argument = pieces.count > 1 ? pieces[1].trimmingCharacters(in: .whitespaces) : ""
            switch key {
            case "expires":
                if let date = HTTPDate.parse(argument) { cookie.expires = date }
            case "max-age":
                if let seconds = Int(argument) { maxAge = seconds }
            case "domain":
                var domain = argument.lowercased()
                while domain.hasPrefix(".") { domain.removeFirst() }
                guard !domain.isEmpty else { continue }
                // A cookie for a domain the host is not in, or for a bare top-level name, is refused.
                guard domainMatches(host, domain), domain.contains(".") || domain == host else { return nil }
                cookie.domain = domain
                cookie.hostOnly = false
            case "path":
                if argument.hasPrefix("/") { cookie.path = argument }
            case "secure":
                cookie.secure = true
            case "httponly":
                cookie.httpOnly = true
            default:
                continue
            }
        }
        if let maxAge {
            cookie.expires = maxAge <= 0 ? Date.distantPast : now.addingTimeInterval(Double(min(maxAge, 1 << 40)))
        }
        return cookie
    }

    static func domainMatches(_ host: String, _ domain: String) -> Bool {
        if host == domain { return true }
        // Only names, not addresses, match by suffix.
        guard IPAddress.bytes(host) == nil else { return false }
        return host.hasSuffix("." + domain)
    }

    static func pathMatches(_ path: String, _ cookiePath: String) -> Bool {
        if path == cookiePath { return true }
        guard path.hasPrefix(cookiePath) else { return false }
        return cookiePath.hasSuffix("/") || path.dropFirst(cookiePath.count).hasPrefix("/")
    }

    static func defaultPath(_ path: String) -> String {
        guard path.hasPrefix("/"), let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }
}

// MARK: The Netscape cookie file

extension CookieJar {
    /// Reads a Netscape-format file: `domain  includeSubdomains  path  secure  expiry  name
    /// value`, tab-separated; `#HttpOnly_` before the domain marks HttpOnly; other `#` lines
    /// and malformed lines are skipped; expired cookies are dropped.
    static func netscapeCookies(_ text: String, now: Date = Date()) -> [Cookie] {
        var cookies: [Cookie] = []
        for rawLine in text.split(whereSeparator: \.isNewline) {
            var line = String(rawLine)
            var httpOnly = false
            if line.hasPrefix("#HttpOnly_") {
                httpOnly = true
                line.removeFirst("#HttpOnly_".count)
            } else if line.hasPrefix("#") || line.trimmingCharacters(in: .whitespaces).isEmpty {
                continue
            }
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false).map(String.init)
            guard fields.count >= 7, let expiry = Int64(fields[4]) else { continue }
            var domain = fields[0].lowercased()
            let includeSubdomains = fields[1].uppercased() == "TRUE"
            while domain.hasPrefix(".") { domain.removeFirst() }
            guard !domain.isEmpty, !fields[5].isEmpty else { continue }
            let expires = expiry == 0 ? nil : Date(timeIntervalSince1970: Double(expiry))
            if let expires, expires <= now { continue }
            cookies.append(
                Cookie(
                    name: fields[5],
                    value: fields[6...].joined(separator: "\t"),
                    domain: domain,
                    hostOnly: !includeSubdomains,
                    path: fields[2].hasPrefix("/") ? fields[2] : "/",
                    secure: fields[3].uppercased() == "TRUE",
                    httpOnly: httpOnly,
                    expires: expires
                )
            )
            if cookies.count >= maxCookies { break }
        }
        return cookies
    }

    /// The jar as a Netscape-format file (session cookies with expiry 0, as curl writes them).
    func netscapeText(now: Date = Date()) -> String {
        var text = "# Netscape HTTP Cookie File\n# Written by Haul. Edit at your own risk.\n\n"
        for cookie in all where cookie.expires.map({ $0 > now }) ?? true {
            let domain = (cookie.httpOnly ? "#HttpOnly_" : "") + (cookie.hostOnly ? "" : ".") + cookie.domain
            let expiry = cookie.expires.map { String(Int64($0.timeIntervalSince1970)) } ?? "0"
            let fields = [
                domain, cookie.hostOnly ? "FALSE" : "TRUE", cookie.path, cookie.secure ? "TRUE" : "FALSE", expiry,
                cookie.name, cookie.value,
            ]
            text += fields.joined(separator: "\t") + "\n"
        }
        return text
    }

    /// `name=value; name2=value2` as host-only cookies of `host` for every path.
    static func cookies(fromHeader header: String, host: String) -> [Cookie] {
        header.split(separator: ";").compactMap { pair in
            guard let equals = pair.firstIndex(of: "=") else { return nil }
            let name = pair[..<equals].trimmingCharacters(in: .whitespaces)
            guard !name.isEmpty else { return nil }
            return Cookie(
                name: name,
                value: pair[pair.index(after: equals)...].trimmingCharacters(in: .whitespaces),
                domain: host.lowercased(),
                hostOnly: true,
                path: "/",
                secure: false,
                httpOnly: false,
                expires: nil
            )
        }
    }

    /// The jar a download starts with: its file's cookies, then those given as a header.
    /// - Throws: ``HaulError/Code/invalidArgument`` when the file cannot be read.
    static func starting(with options: CookieOptions, url: URL) throws -> CookieJar {
        var initial: [Cookie] = []
        if let file = options.load {
            // A file that does not exist yet is an empty jar, as curl takes it (-b and -c
            // often name the same file).
            if FileManager.default.fileExists(atPath: file) {
                guard let data = FileManager.default.contents(atPath: file), data.count <= 16 << 20 else {
                    throw HaulError(
                        .invalidArgument,
                        "The cookie file \(file) cannot be read, or is larger than 16 MiB",
                        path: file
                    )
                }
                initial += netscapeCookies(String(decoding: data, as: UTF8.self))
            }
        }
        if let header = options.header, let host = url.host { initial += cookies(fromHeader: header, host: host) }
        return CookieJar(initial)
    }

    /// Writes the jar to `path` (mode 0600, replaced atomically).
    func save(to path: String) throws {
        let temporary = path + ".haul-\(UUID().uuidString.prefix(8))"
        let descriptor = open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard descriptor >= 0 else { throw HaulError.fileSystem("write the cookie jar", path: path, errno: errno) }
        var text = netscapeText()
        let written = text.withUTF8 { bytes in SystemCall.write(descriptor, bytes.baseAddress!, bytes.count) }
        var failure = errno
        close(descriptor)
        if written == text.utf8.count {
            if rename(temporary, path) == 0 { return }
            failure = errno
        } else if written >= 0 {
            failure = ENOSPC
        }
        unlink(temporary)
        throw HaulError.fileSystem("write the cookie jar", path: path, errno: failure)
    }
}
