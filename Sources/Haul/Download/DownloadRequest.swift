import Foundation

/// One request header sent with a download, e.g. `Authorization: Bearer …`.
public struct HTTPHeaderField: Sendable, Hashable, Codable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }

    /// Checks HTTP field syntax (RFC 9110 §5.1, §5.5): the name a token, the value free of
    /// CR, LF and NUL — so no header can smuggle another into the request. (Scalars, not
    /// Characters: "\r\n" is one Character in Swift and equals neither "\r" nor "\n".)
    /// - Throws: ``HaulError/Code/invalidArgument`` naming the header.
    public func validate() throws {
        guard !name.isEmpty, name.count <= 256, name.allSatisfy({ HTTPHeaderField.tokenCharacters.contains($0) }) else {
            throw HaulError(
                .invalidArgument,
                "Invalid header name '\(name.prefix(64))'",
                hint: "A header name is a token: letters, digits and !#$%&'*+-.^_`|~"
            )
        }
        guard value.utf8.count <= 16384,
            !value.unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" })
        else {
            throw HaulError(.invalidArgument, "Header '\(name)' holds a line break, NUL or more than 16 KiB")
        }
    }

    private static let tokenCharacters = Set(
        "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
    )

    /// Parses `Name: value`.
    /// - Throws: ``HaulError/Code/invalidArgument`` when there is no colon, the name is not a
    ///   valid token, or the value holds a line break.
    public init(parsing line: String) throws {
        guard let colon = line.firstIndex(of: ":") else {
            throw HaulError(.invalidArgument, "Invalid header '\(line)'", hint: "Write it as 'Name: value'")
        }
        let name = line[..<colon].trimmingCharacters(in: .whitespaces)
        let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        self.init(name: name, value: value)
        try validate()
    }
}

/// What to download, where, and how to check it.
public struct DownloadRequest: Sendable {
    /// The http(s) URL to download.
    public var url: URL
    /// Where the file goes.
    public var destination: Destination
    /// Extra request headers.
    public var headers: [HTTPHeaderField]
    /// The digest the finished file must have; checked before it is moved into place.
    public var checksum: Checksum?
    /// Whether an existing file at the destination may be replaced.
    public var overwrite: Bool
    /// The session the task belongs to: a client of the daemon attaches to it to receive
    /// the task's events, including those it missed.
    public var session: String
    /// How many connections may share the download (segments with work stealing); nil for
    /// the downloader's default. Only a file of known length whose server honours ranges
    /// and gives a validator is split.
    public var connections: Int?
    /// The smallest segment worth its own connection, in bytes; nil for the downloader's default.
    public var minSplitSize: Int64?
    /// This download's rate limit in bytes per second; nil for none.
    public var rateLimit: Int64?
    /// Whom the download trusts over TLS and how it identifies itself; the system's
    /// authorities by default.
    public var tls: TLSOptions
    /// The proxies the download's requests go through; direct by default (the environment's
    /// `http_proxy` and friends only when asked: ``ProxySettings/fromEnvironment(_:)``).
    public var proxy: ProxySettings
    /// The user and password (or netrc file) for the server; `user:password@` in the URL wins.
    public var credentials: Credentials
    /// What the download does with cookies: kept across its redirects by default.
    public var cookies: CookieOptions
    /// Whether the download may use a metered network (``NetworkPolicy``); a manager's
    /// policy must allow it too.
    public var allowsMeteredNetwork = true
    /// Whether a file already at the destination is checked against the server, as wget's
    /// `-N` and curl's `-z` do: a conditional request (`If-None-Match` with the recorded
    /// ETag, else `If-Modified-Since`), and a newer version, if there is one, downloaded and
    /// put in its place atomically. Without it a completed file is kept without a request,
    /// and a file Haul did not download is left alone (unless ``overwrite``).
    public var checkNewer = false
    /// Whether a file at the destination that Haul did not download — or a `NAME.part` no
    /// download of this store owns — is continued, as `wget -c`, `curl -C -` and `aria2c -c`
    /// do: its last 64 KiB are compared with the server's bytes at the same place and its
    /// length with the server's, and only the rest is fetched. A file that does not match is
    /// refused (``HaulError/Code/destinationExists``) and left as it was.
    public var continuesExistingFile = false
    /// Programs run when the download ends (``Hooks``), by a ``DownloadManager``; each one set
    /// wins over the manager's own.
    public var hooks = Hooks.none
    /// Other URLs of the same file, as aria2 takes several URIs of one: the file's segments
    /// are spread over ``url`` and these. A mirror takes segments once its bytes at a place
    /// another source wrote agree and its length is the file's; one that fails, or serves
    /// another file, is dropped for this download while the others continue.
    public var mirrors: [URL] = []
    /// The most connections to any one source (the URL or a mirror); nil for 4.
    public var maxConnectionsPerServer: Int?
    /// The hash of every piece of the file (a Metalink's `<pieces>`): each piece is checked
    /// as soon as it is on disk, one that does not match is fetched again from another
    /// source, and a source that served two bad pieces is dropped. Which pieces are
    /// verified is kept in the store, so a resumed download checks none of them again.
    public var pieceHashes: PieceHashes?
    /// Whether a file that turns out to be a Metalink (served as
    /// `application/metalink4+xml` or `application/metalink+xml`, or named `.meta4` or
    /// `.metalink`) is followed, as aria2's `--follow-metalink` does: once it is complete, a
    /// ``DownloadManager`` adds the files it describes — into the same directory (its
    /// subdirectories made), from their URLs at once, checked against their hashes and piece
    /// hashes, with this request's options — and keeps the Metalink as downloaded. Files a
    /// followed Metalink describes are not followed in turn.
    public var followsMetalink = true

    /// The session of tasks added without one.
    public static let defaultSession = "default"

    public init(
        url: URL,
        destination: Destination,
        headers: [HTTPHeaderField] = [],
        checksum: Checksum? = nil,
        overwrite: Bool = false,
        session: String = DownloadRequest.defaultSession,
        connections: Int? = nil,
        minSplitSize: Int64? = nil,
        rateLimit: Int64? = nil,
        tls: TLSOptions = TLSOptions(),
        proxy: ProxySettings = .direct,
        credentials: Credentials = .none,
        cookies: CookieOptions = .standard
    ) {
        self.credentials = credentials
        self.cookies = cookies
        self.tls = tls
        self.proxy = proxy
        self.url = url
        self.destination = destination
        self.headers = headers
        self.checksum = checksum
        self.overwrite = overwrite
        self.session = session
        self.connections = connections
        self.minSplitSize = minSplitSize
        self.rateLimit = rateLimit
    }

    /// The most connections one download may use.
    public static let maxConnections = 64
    /// The smallest minimum split size.
    public static let smallestSplit: Int64 = 64 * 1024
    /// The largest `minSplitSize`.
    public static let largestSplit: Int64 = 1 << 40
    /// The longest URL taken, in bytes (servers refuse far shorter ones).
    public static let maxURLLength = 64 * 1024

    /// Rejects connection counts, split sizes and rates that cannot work.
    func validateTuning() throws {
        if let connections, !(1...DownloadRequest.maxConnections).contains(connections) {
            throw HaulError(
                .invalidArgument,
                "Invalid number of connections \(connections)",
                hint: "Use 1 to \(DownloadRequest.maxConnections)"
            )
        }
        if let minSplitSize, !(DownloadRequest.smallestSplit...DownloadRequest.largestSplit).contains(minSplitSize) {
            throw HaulError(
                .invalidArgument,
                "The minimum split size must be from 64 KiB to 1 TiB, not \(minSplitSize)"
            )
        }
        try DownloadRequest.validateRateLimit(rateLimit)
        if let maxConnectionsPerServer, !(1...DownloadRequest.maxConnections).contains(maxConnectionsPerServer) {
            throw HaulError(
                .invalidArgument,
                "Invalid number of connections per server \(maxConnectionsPerServer)",
                hint: "Use 1 to \(DownloadRequest.maxConnections)"
            )
        }
    }

    /// Rejects a rate limit outside 1 byte to 1 TiB per second (nil, no limit, is fine).
    public static func validateRateLimit(_ bytesPerSecond: Int64?) throws {
        if let bytesPerSecond, !(1...RateLimiter.maxBytesPerSecond).contains(bytesPerSecond) {
            throw HaulError(
                .invalidArgument,
                "The rate limit must be between 1 byte and 1 TiB per second, not \(bytesPerSecond)"
            )
        }
    }

    /// Checks everything about the request that can be checked before it is recorded: the
    /// URL, the session, the tuning, the headers' syntax, the file name and that the
    /// directory can be written. A daemon adding several downloads checks them all first,
    /// so a bad one adds none.
    /// - Throws: ``HaulError`` saying what is wrong.
    public func validate() throws {
        var checked: Set<String> = []
        try validate(checkedDirectories: &checked)
    }

    /// ``validate()`` of one of many: a directory in `checkedDirectories` was checked by an
    /// earlier one (a batch of thousands into one directory looks at it once); this one's
    /// is added once checked.
    package func validate(checkedDirectories: inout Set<String>) throws {
        try validateFetching()
        try DownloadRequest.validateSession(session)
        if !checkedDirectories.contains(destination.directory) {
            try FileOps.checkWritableDirectory(destination.directory)
            checkedDirectories.insert(destination.directory)
        }
        if let name = destination.fileName, !FileNaming.isPlainName(name) {
            throw HaulError(.invalidArgument, "Invalid file name '\(name)'", path: destination.directory)
        }
    }

    /// Checks what fetching needs, whatever the destination: the URL, the tuning, the
    /// headers' syntax, and the TLS, proxy, credential and cookie options.
    func validateFetching() throws {
        try DownloadRequest.validate(url)
        try validateMirrors()
        try validateTuning()
        for header in headers { try header.validate() }
        try tls.validate()
        try proxy.validate()
        try credentials.validate()
        try cookies.validate()
        try hooks.validate()
    }

    /// Checks the mirrors: at most 15, each an http(s) URL with a host, none repeating
    /// another source.
    func validateMirrors() throws {
        guard !mirrors.isEmpty else { return }
        try DownloadSource.validate(([url] + mirrors).map { DownloadSource(url: $0) })
        var seen: Set<String> = [url.absoluteString]
        for mirror in mirrors where !seen.insert(mirror.absoluteString).inserted {
            throw HaulError(
                .invalidArgument,
                "The mirror \(Redaction.url(mirror)) is given twice",
                hint: "Give each source once"
            )
        }
    }

    /// The sources a task records: the URL and the mirrors; none without mirrors.
    var sources: [DownloadSource] {
        mirrors.isEmpty ? [] : ([url] + mirrors).map { DownloadSource(url: $0) }
    }

    /// Whether `name` is 1 to `maxLength` ASCII letters, digits, `.`, `_` or `-`: what a
    /// session's name and a daemon's name in a shared store may be.
    package static func isPlainName(_ name: String, maxLength: Int) -> Bool {
        (1...maxLength).contains(name.utf8.count)
            && name.utf8.allSatisfy { byte in
                switch byte {
                case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                    UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "-"):
                    true
                default: false
                }
            }
    }

    /// Checks a session name: 1 to 128 letters, digits, `.`, `_` or `-`.
    /// - Throws: ``HaulError/Code/invalidArgument`` for anything else.
    public static func validateSession(_ name: String) throws {
        try validatePlainName(name, maxLength: 128, of: "session")
    }

    /// Checks a fleet node's name (`--node`): 1 to 64 letters, digits, `.`, `_` or `-` (a
    /// host name is one).
    /// - Throws: ``HaulError/Code/invalidArgument`` for anything else.
    package static func validateNodeName(_ name: String) throws {
        try validatePlainName(name, maxLength: 64, of: "node")
    }

    /// Checks that `name` (a `what`'s) is 1 to `maxLength` letters, digits, `.`, `_` or `-`;
    /// a refused one is shown cut short, however long it came.
    private static func validatePlainName(_ name: String, maxLength: Int, of what: String) throws {
        guard isPlainName(name, maxLength: maxLength) else {
            throw HaulError(
                .invalidArgument,
                "Invalid \(what) name '\(name.prefix(maxLength + 16))'",
                hint: "Use 1 to \(maxLength) letters, digits, '.', '_' or '-'"
            )
        }
    }

    /// Parses and checks a URL typed by a person: it must be absolute http(s) with a host.
    /// - Throws: ``HaulError/Code/invalidURL`` or ``HaulError/Code/unsupportedScheme``.
    public static func parseURL(_ text: String) throws -> URL {
        guard text.utf8.count <= maxURLLength else {
            throw HaulError.invalidURL(String(text.prefix(80)) + "…", reason: "it is longer than 64 KiB")
        }
        let trimmed = text.trimmingWhitespace()
        guard !trimmed.isEmpty else { throw HaulError.invalidURL(text, reason: "it is empty") }
        // Percent-encode characters a person may type (spaces, non-ASCII) but URL(string:) rejects.
        let url =
            URL(string: trimmed)
            ?? trimmed.addingPercentEncoding(withAllowedCharacters: .urlAllowed).flatMap { URL(string: $0) }
        guard let url, let scheme = url.scheme?.lowercased() else {
            throw HaulError.invalidURL(text, reason: "it is not a URL")
        }
        try validate(url, scheme: scheme, original: text)
        return url
    }

    package static func validate(_ url: URL, scheme: String? = nil, original: String? = nil) throws {
        let scheme = scheme ?? url.scheme?.lowercased() ?? ""
        guard scheme == "http" || scheme == "https" else { throw HaulError.unsupportedScheme(url) }
        guard let host = url.host, !host.isEmpty else {
            throw HaulError.invalidURL(original ?? url.absoluteString, reason: "it has no host")
        }
        if let port = url.port, !(1...65535).contains(port) {
            throw HaulError.invalidURL(
                original ?? url.absoluteString,
                reason: "port \(port) is not between 1 and 65535"
            )
        }
    }
}

extension CharacterSet {
    fileprivate static let urlAllowed: CharacterSet = {
        var set = CharacterSet.urlQueryAllowed
        set.formUnion(.urlPathAllowed)
        set.insert(charactersIn: "#[]@!$&'()*+,;=%")
        return set
    }()
}
