import Foundation

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
            public var headers: [Header]?
            public var overwrite: Bool?
            public var session: String?
            /// Connections to split the file over.
            public var connections: Int?
            /// The smallest segment, in bytes.
            public var minSplitSize: Int64?
            /// The task's own rate limit, in bytes per second.
            public var rateLimit: Int64?
            /// Whom the download trusts over TLS (paths as the daemon sees them); absent for the
            /// daemon's defaults (the system's authorities, or its `SSL_CERT_FILE`/`SSL_CERT_DIR`).
            public var tls: TLS?
            /// The proxies; absent for the daemon's own (its `http_proxy`, `https_proxy`,
            /// `all_proxy`, `no_proxy`). `{}` for none.
            public var proxy: Proxy?
            /// The user and password (or a netrc file, as the daemon sees it) for the server.
            /// Kept in the daemon's store; never in an answer or an event.
            public var credentials: Credentials?
            /// What the download does with cookies; absent for the defaults (kept across
            /// its redirects, no files).
            public var cookies: Cookies?
            /// false: the download never uses a metered network (default true).
            public var allowsMeteredNetwork: Bool?
            /// true: a file already at the destination is checked against the server and
            /// replaced by a newer version (default false).
            public var checkNewer: Bool?
            /// true: a file at the destination (or a stray part file) is continued when it
            /// matches the server's (default false).
            public var continuesExistingFile: Bool?
            /// Programs the daemon runs when the download ends (paths as the daemon sees
            /// them; a bare name is looked up in the daemon's PATH).
            public var hooks: Hooks?
            /// Other URLs of the same file (at most 15).
            public var mirrors: [String]?
            /// The most connections to any one source (default 4).
            public var maxConnectionsPerServer: Int?
            /// The hash of every piece.
            public var pieceHashes: Pieces?
            /// false: a file that turns out to be a Metalink is not followed (default true).
            public var followsMetalink: Bool?

            /// Piece hashes as JSON: `{"algorithm": "sha256", "length": 262144, "hashes": ["…"]}`.
            public struct Pieces: Codable, Sendable {
                /// `sha256`, `sha512`, `sha1` or `md5`.
                public var algorithm: String
                /// Bytes in each piece but the last.
                public var length: Int64
                /// One hex digest per piece, in order.
                public var hashes: [String]

                public init(algorithm: String, length: Int64, hashes: [String]) {
                    self.algorithm = algorithm
                    self.length = length
                    self.hashes = hashes
                }
            }

            public init(url: String, directory: String) {
                self.url = url
                self.directory = directory
            }
        }
    }
}
