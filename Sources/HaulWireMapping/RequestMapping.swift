import Foundation
import Haul
import HaulWire

// A download as the library describes it (``DownloadRequest``) and as `POST /v1/tasks`
// carries it (``API/AddRequest/Download``): the client writes one from a request, the
// daemon reads the request back, validating every field.

extension API.AddRequest.Download {
    /// The body of `request`; defaults are left out.
    public init(_ request: DownloadRequest) {
        self.init(url: request.url.absoluteString, directory: request.destination.directory)
        fileName = request.destination.fileName
        checksum = request.checksum?.description
        headers = request.headers.isEmpty ? nil : request.headers.map { API.Header(name: $0.name, value: $0.value) }
        overwrite = request.overwrite ? true : nil
        session = request.session
        connections = request.connections
        minSplitSize = request.minSplitSize
        rateLimit = request.rateLimit
        tls = request.tls.isDefault ? nil : API.TLS(request.tls)
        proxy = API.Proxy(request.proxy)
        credentials = request.credentials == .none ? nil : API.Credentials(request.credentials)
        cookies = request.cookies == .standard ? nil : API.Cookies(request.cookies)
        allowsMeteredNetwork = request.allowsMeteredNetwork ? nil : false
        checkNewer = request.checkNewer ? true : nil
        continuesExistingFile = request.continuesExistingFile ? true : nil
        hooks =
            request.hooks == .none
            ? nil : API.Hooks(onComplete: request.hooks.onComplete, onError: request.hooks.onError)
        mirrors = request.mirrors.isEmpty ? nil : request.mirrors.map(\.absoluteString)
        maxConnectionsPerServer = request.maxConnectionsPerServer
        pieceHashes = request.pieceHashes.map(Pieces.init)
        followsMetalink = request.followsMetalink ? nil : false
    }

    /// The request it describes.
    /// - Throws: ``HaulError`` for a bad URL, a relative directory, a bad checksum, session,
    ///   header or piece hashes, or too many mirrors.
    public func request() throws -> DownloadRequest {
        var directories: [String: String] = [:]
        return try request(directories: &directories)
    }

    /// ``request()`` of one of many downloads: `directories` holds each directory made
    /// absolute (symbolic links resolved) by an earlier one, so a batch of thousands into
    /// one directory resolves it once; this one's is added.
    public func request(directories: inout [String: String]) throws -> DownloadRequest {
        let parsed = try DownloadRequest.parseURL(url)
        guard directory.hasPrefix("/") else {
            throw HaulError(.invalidArgument, "The directory '\(directory)' is not an absolute path")
        }
        let resolved = directories[directory] ?? Destination.absolute(directory)
        directories[directory] = resolved
        let destination = Destination(directory: resolved, fileName: fileName)
        let session = self.session ?? DownloadRequest.defaultSession
        try DownloadRequest.validateSession(session)
        var request = DownloadRequest(
            url: parsed,
            destination: destination,
            headers: (headers ?? []).map { HTTPHeaderField(name: $0.name, value: $0.value) },
            checksum: try checksum.map { try Checksum(parsing: $0) },
            overwrite: overwrite ?? false,
            session: session,
            connections: connections,
            minSplitSize: minSplitSize,
            rateLimit: rateLimit == 0 ? nil : rateLimit,  // 0: none, as everywhere a rate is given.
            tls: tls.map(TLSOptions.init) ?? TLSOptions(),
            proxy: proxy.map(ProxySettings.init) ?? .direct,
            credentials: credentials.map(Credentials.init) ?? .none,
            cookies: cookies.map(CookieOptions.init) ?? .standard
        )
        request.allowsMeteredNetwork = allowsMeteredNetwork ?? true
        request.checkNewer = checkNewer ?? false
        request.continuesExistingFile = continuesExistingFile ?? false
        request.hooks = hooks.map { Hooks(onComplete: $0.onComplete, onError: $0.onError) } ?? .none
        if let mirrors {
            guard mirrors.count < DownloadSource.maxSources else {
                throw HaulError(
                    .invalidArgument,
                    "A download takes at most \(DownloadSource.maxSources - 1) mirrors, not \(mirrors.count)"
                )
            }
            request.mirrors = try mirrors.map(DownloadRequest.parseURL)
        }
        request.maxConnectionsPerServer = maxConnectionsPerServer
        request.pieceHashes = try pieceHashes?.pieceHashes()
        request.followsMetalink = followsMetalink ?? true
        return request
    }
}

extension API.AddRequest.Download.Pieces {
    /// The body of `pieces`.
    public init(_ pieces: PieceHashes) {
        self.init(algorithm: pieces.algorithm.name, length: pieces.length, hashes: (0..<pieces.count).map(pieces.hex))
    }

    /// The piece hashes they describe.
    /// - Throws: ``HaulError`` for an unknown algorithm, a length or count out of bounds,
    ///   or a digest that is not hex of the algorithm's length.
    public func pieceHashes() throws -> PieceHashes {
        guard let algorithm = Checksum.Algorithm(named: algorithm) else {
            throw HaulError(
                .invalidArgument,
                "Unknown piece hash algorithm '\(algorithm.prefix(40))'",
                hint: "Use sha256, sha512, sha1 or md5"
            )
        }
        return try PieceHashes(algorithm: algorithm, length: length, hexDigests: hashes)
    }
}

extension API.TLS {
    public init(_ options: TLSOptions) {
        self.init(
            certificateAuthorities: options.certificateAuthorities,
            certificateDirectory: options.certificateDirectory,
            verifiesCertificates: options.verifiesCertificates,
            clientCertificate: options.clientCertificate,
            clientKey: options.clientKey
        )
    }
}

extension TLSOptions {
    public init(_ wire: API.TLS) {
        self.init(
            certificateAuthorities: wire.certificateAuthorities,
            certificateDirectory: wire.certificateDirectory,
            verifiesCertificates: wire.verifiesCertificates ?? true,
            clientCertificate: wire.clientCertificate,
            clientKey: wire.clientKey
        )
    }
}

extension API.Proxy {
    public init(_ settings: ProxySettings) {
        self.init(http: settings.http, https: settings.https, all: settings.all, noProxy: settings.noProxy)
    }
}

extension ProxySettings {
    public init(_ wire: API.Proxy) {
        self.init(http: wire.http, https: wire.https, all: wire.all, noProxy: wire.noProxy ?? [])
    }
}

extension API.Credentials {
    public init(_ credentials: Credentials) {
        self.init(user: credentials.user, password: credentials.password, netrcFile: credentials.netrcFile)
    }
}

extension Credentials {
    public init(_ wire: API.Credentials) {
        self.init(user: wire.user, password: wire.password, netrcFile: wire.netrcFile)
    }
}

extension API.Cookies {
    public init(_ options: CookieOptions) {
        self.init(enabled: options.enabled, load: options.load, header: options.header, save: options.save)
    }
}

extension CookieOptions {
    public init(_ wire: API.Cookies) {
        self.init(enabled: wire.enabled ?? true, load: wire.load, header: wire.header, save: wire.save)
    }
}
