import Foundation
import Haul

/// The body of `POST /v1/tasks`.
extension API {
    /// `POST /v1/tasks`: downloads to add.
    public struct AddRequest: Codable, Sendable {
        public var downloads: [Download]
        /// Higher starts sooner.
        public var priority: Int?

        public init(downloads: [Download], priority: Int? = nil) {
            self.downloads = downloads
            self.priority = priority
        }

        /// One download. Paths are absolute: the daemon does not know the client's working directory.
        public struct Download: Codable, Sendable {
            public var url: String
            /// The directory the file goes into.
            public var directory: String
            /// The file name; absent to let the server or the URL choose it.
            public var fileName: String?
            /// `sha256=HEX` (or sha512, sha1, md5).
            public var checksum: String?
            public var headers: [HTTPHeaderField]?
            public var overwrite: Bool?
            public var session: String?
            /// Connections to split the file over (see ``DownloadRequest/connections``).
            public var connections: Int?
            /// The smallest segment, in bytes.
            public var minSplitSize: Int64?
            /// The task's own rate limit, in bytes per second.
            public var rateLimit: Int64?
            /// Whom the download trusts over TLS (paths as the daemon sees them); absent for the
            /// daemon's defaults (the system's authorities, or its `SSL_CERT_FILE`/`SSL_CERT_DIR`).
            public var tls: TLSOptions?
            /// The proxies; absent for the daemon's own (its `http_proxy`, `https_proxy`,
            /// `all_proxy`, `no_proxy`). `{}` for none.
            public var proxy: ProxySettings?
            /// The user and password (or a netrc file, as the daemon sees it) for the server.
            /// Kept in the daemon's store; never in an answer or an event.
            public var credentials: Credentials?
            /// What the download does with cookies; absent for the defaults (kept across
            /// its redirects, no files).
            public var cookies: CookieOptions?
            /// false: the download never uses a metered network (default true).
            public var allowsMeteredNetwork: Bool?
            /// true: a file already at the destination is checked against the server and
            /// replaced by a newer version (``DownloadRequest/checkNewer``; default false).
            public var checkNewer: Bool?
            /// true: a file at the destination (or a stray part file) is continued when it
            /// matches the server's (``DownloadRequest/continuesExistingFile``; default false).
            public var continuesExistingFile: Bool?
            /// Programs the daemon runs when the download ends (paths as the daemon sees
            /// them; a bare name is looked up in the daemon's PATH).
            public var hooks: Hooks?
            /// Other URLs of the same file (``DownloadRequest/mirrors``; at most 15).
            public var mirrors: [String]?
            /// The most connections to any one source (default 4).
            public var maxConnectionsPerServer: Int?
            /// The hash of every piece (``DownloadRequest/pieceHashes``).
            public var pieceHashes: Pieces?
            /// false: a file that turns out to be a Metalink is not followed
            /// (``DownloadRequest/followsMetalink``; default true).
            public var followsMetalink: Bool?

            /// Piece hashes as JSON: `{"algorithm": "sha256", "length": 262144, "hashes": ["…"]}`.
            public struct Pieces: Codable, Sendable {
                /// `sha256`, `sha512`, `sha1` or `md5`.
                public var algorithm: String
                /// Bytes in each piece but the last.
                public var length: Int64
                /// One hex digest per piece, in order.
                public var hashes: [String]

                public init(_ pieces: PieceHashes) {
                    algorithm = pieces.algorithm.name
                    length = pieces.length
                    hashes = (0..<pieces.count).map(pieces.hex)
                }

                /// The piece hashes they describe.
                /// - Throws: ``HaulError`` for an unknown algorithm, a length or count out of
                ///   bounds, or a digest that is not hex of the algorithm's length.
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

            public init(_ request: DownloadRequest) {
                url = request.url.absoluteString
                directory = request.destination.directory
                fileName = request.destination.fileName
                checksum = request.checksum?.description
                headers = request.headers.isEmpty ? nil : request.headers
                overwrite = request.overwrite ? true : nil
                session = request.session
                connections = request.connections
                minSplitSize = request.minSplitSize
                rateLimit = request.rateLimit
                tls = request.tls.isDefault ? nil : request.tls
                proxy = request.proxy
                credentials = request.credentials == .none ? nil : request.credentials
                cookies = request.cookies == .standard ? nil : request.cookies
                allowsMeteredNetwork = request.allowsMeteredNetwork ? nil : false
                checkNewer = request.checkNewer ? true : nil
                continuesExistingFile = request.continuesExistingFile ? true : nil
                hooks = request.hooks == .none ? nil : request.hooks
                mirrors = request.mirrors.isEmpty ? nil : request.mirrors.map(\.absoluteString)
                maxConnectionsPerServer = request.maxConnectionsPerServer
                pieceHashes = request.pieceHashes.map(Pieces.init)
                followsMetalink = request.followsMetalink ? nil : false
            }

            /// The request it describes.
            /// - Throws: ``HaulError`` for a bad URL, a relative directory, a bad checksum or session.
            public func request() throws -> DownloadRequest {
                let parsed = try DownloadRequest.parseURL(url)
                guard directory.hasPrefix("/") else {
                    throw HaulError(.invalidArgument, "The directory '\(directory)' is not an absolute path")
                }
                var destination = Destination.directory(directory)
                destination.fileName = fileName
                let session = self.session ?? DownloadRequest.defaultSession
                try DownloadRequest.validateSession(session)
                var request = DownloadRequest(
                    url: parsed,
                    destination: destination,
                    headers: headers ?? [],
                    checksum: try checksum.map { try Checksum(parsing: $0) },
                    overwrite: overwrite ?? false,
                    session: session,
                    connections: connections,
                    minSplitSize: minSplitSize,
                    rateLimit: rateLimit,
                    tls: tls ?? TLSOptions(),
                    proxy: proxy ?? .direct,
                    credentials: credentials ?? .none,
                    cookies: cookies ?? .standard
                )
                request.allowsMeteredNetwork = allowsMeteredNetwork ?? true
                request.checkNewer = checkNewer ?? false
                request.continuesExistingFile = continuesExistingFile ?? false
                request.hooks = hooks ?? .none
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
    }
}
