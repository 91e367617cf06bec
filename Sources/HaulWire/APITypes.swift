import Foundation
import Haul

/// The JSON bodies of the daemon's HTTP API. Every endpoint is listed in the README.
public enum API {
    /// The API's version prefix.
    public static let prefix = "/v1"

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

    /// Which tasks an operation applies to: some ids, a session's, or all. Exactly one is given.
    public struct Selector: Codable, Sendable, Equatable {
        public var ids: [UUID]?
        public var session: String?
        public var all: Bool?
        /// `remove` only: also delete finished files.
        public var deleteFiles: Bool?

        public init(ids: [UUID]? = nil, session: String? = nil, all: Bool? = nil, deleteFiles: Bool? = nil) {
            self.ids = ids
            self.session = session
            self.all = all
            self.deleteFiles = deleteFiles
        }

        public static func tasks(_ ids: [UUID]) -> Selector { Selector(ids: ids) }
        public static func session(_ name: String) -> Selector { Selector(session: name) }
        public static let everything = Selector(all: true)

        /// - Throws: ``HaulError/Code/invalidArgument`` unless exactly one of ids, session or
        ///   all is given, and a session is a valid name.
        package func validate() throws {
            let given = [ids != nil, session != nil, all == true].filter { $0 }.count
            guard given == 1 else {
                throw HaulError(.invalidArgument, "Name the tasks: give exactly one of ids, session, or all")
            }
            if let session { try DownloadRequest.validateSession(session) }
        }
    }

    /// `GET`/`PUT /v1/settings`: the limits, changed live.
    public struct Settings: Codable, Sendable, Equatable {
        public var maxConcurrentDownloads: Int?
        /// Downloads at once against one host.
        public var maxDownloadsPerHost: Int?
        /// Connections at once to one host, over all its downloads (every running download
        /// holds one before any holds a second).
        public var maxConnectionsPerHost: Int?
        /// The limit on all downloads together, in bytes per second; 0 for none.
        public var overallRateLimit: Int64?
        /// Seconds a task keeps trying after failures that may pass before it fails
        /// (default 86400: a day).
        public var giveUpAfter: Int64?
        /// Whether downloads may use metered networks (default true).
        public var allowMetered: Bool?
        /// Interface name patterns that are metered (default `["wwan*", "ppp*"]`).
        public var meteredInterfaces: [String]?
        /// The speed each connection must keep, bytes per second; 0 for none (the default).
        public var lowestSpeedLimit: Int64?
        /// Seconds a connection may stay under ``lowestSpeedLimit`` (default 30).
        public var lowestSpeedTime: Int64?

        public init(
            maxConcurrentDownloads: Int? = nil,
            maxDownloadsPerHost: Int? = nil,
            maxConnectionsPerHost: Int? = nil,
            overallRateLimit: Int64? = nil,
            giveUpAfter: Int64? = nil,
            allowMetered: Bool? = nil,
            meteredInterfaces: [String]? = nil,
            lowestSpeedLimit: Int64? = nil,
            lowestSpeedTime: Int64? = nil
        ) {
            self.lowestSpeedLimit = lowestSpeedLimit
            self.lowestSpeedTime = lowestSpeedTime
            self.allowMetered = allowMetered
            self.meteredInterfaces = meteredInterfaces
            self.maxConcurrentDownloads = maxConcurrentDownloads
            self.maxDownloadsPerHost = maxDownloadsPerHost
            self.maxConnectionsPerHost = maxConnectionsPerHost
            self.overallRateLimit = overallRateLimit
            self.giveUpAfter = giveUpAfter
        }
    }

    /// `POST /v1/tasks/rate-limit`: change the rate limit of tasks, live.
    public struct RateLimitChange: Codable, Sendable, Equatable {
        public var tasks: Selector
        /// Bytes per second; 0 for none.
        public var bytesPerSecond: Int64

        public init(tasks: Selector, bytesPerSecond: Int64) {
            self.tasks = tasks
            self.bytesPerSecond = bytesPerSecond
        }
    }

    /// `POST /v1/sessions/{name}/ack`: the client has every event of the session up to `through`.
    public struct Acknowledgement: Codable, Sendable {
        public var through: Int64

        public init(through: Int64) {
            self.through = through
        }
    }

    /// `POST /v1/shutdown`: the daemon is stopping.
    public struct Stopping: Codable, Sendable {
        public var stopping: Bool

        public init(stopping: Bool) {
            self.stopping = stopping
        }
    }

    /// `GET /v1/status`.
    public struct Status: Codable, Sendable, Equatable {
        public var pid: Int32
        public var version: String
        public var startedAt: Date
        public var uptimeSeconds: Double
        public var home: String
        public var socket: String
        public var store: String
        /// `127.0.0.1:PORT` when a TCP listener runs.
        public var listen: String?
        /// Where downloads go when a client names no directory (`haul daemon --dir`).
        public var directory: String?
        /// Background tasks by state.
        public var tasks: [String: Int]
        /// Tasks running: this daemon's; in fleet mode, the whole fleet's (each node's
        /// share is its leases, under ``fleet``).
        public var running: Int
        /// Tasks waiting for a slot: this daemon's; in fleet mode, the fleet queue's.
        public var waiting: Int
        /// The running tasks' combined speed, each averaged over at least a second.
        public var bytesPerSecond: Double
        public var maxConcurrentDownloads: Int
        public var maxDownloadsPerHost: Int
        public var maxConnectionsPerHost: Int
        /// Event streams attached now (`/v1/sessions/{S}/events`, `/v1/events`).
        public var eventStreams: Int
        /// The network as the daemon sees it, and its policy.
        public var network: Network?
        /// In fleet mode (`haul daemon --store`): this daemon's place in the fleet, and the fleet.
        public var fleet: Fleet?

        /// The fleet this daemon belongs to.
        public struct Fleet: Codable, Sendable, Equatable {
            /// This daemon's name.
            public var node: String
            /// The shared store, without its password.
            public var store: String
            /// How long a lease lasts unless renewed.
            public var leaseSeconds: Double
            /// Every daemon that ever joined, by name.
            public var nodes: [Node]

            public init(node: String, store: String, leaseSeconds: Double, nodes: [Node]) {
                self.node = node
                self.store = store
                self.leaseSeconds = leaseSeconds
                self.nodes = nodes
            }

            /// A daemon of the fleet.
            public struct Node: Codable, Sendable, Equatable {
                public var name: String
                public var startedAt: Date
                /// Its last heartbeat (the database's clock).
                public var heartbeatAt: Date
                /// Its downloads' speed at that heartbeat.
                public var bytesPerSecond: Double
                /// The tasks it holds unexpired leases on.
                public var leases: Int
                /// When it left cleanly; absent while it runs, or when it died.
                public var stoppedAt: Date?

                public init(
                    name: String,
                    startedAt: Date,
                    heartbeatAt: Date,
                    bytesPerSecond: Double,
                    leases: Int,
                    stoppedAt: Date?
                ) {
                    self.name = name
                    self.startedAt = startedAt
                    self.heartbeatAt = heartbeatAt
                    self.bytesPerSecond = bytesPerSecond
                    self.leases = leases
                    self.stoppedAt = stoppedAt
                }
            }
        }

        /// The default route and the metered policy.
        public struct Network: Codable, Sendable, Equatable {
            /// The interface the default route leaves by; absent when there is none.
            public var interface: String?
            /// The address it leaves from.
            public var sourceAddress: String?
            /// Whether that interface is up with a carrier.
            public var usable: Bool
            /// Whether that interface is metered.
            public var metered: Bool
            public var allowMetered: Bool
            public var meteredInterfaces: [String]
            /// The interfaces NetworkManager says are metered (absent where it does not run).
            public var meteredBySystem: [String]?
            /// Tasks waiting for the network.
            public var waitingTasks: Int

            public init(
                interface: String?,
                sourceAddress: String?,
                usable: Bool,
                metered: Bool,
                allowMetered: Bool,
                meteredInterfaces: [String],
                meteredBySystem: [String]? = nil,
                waitingTasks: Int
            ) {
                self.meteredBySystem = meteredBySystem
                self.interface = interface
                self.sourceAddress = sourceAddress
                self.usable = usable
                self.metered = metered
                self.allowMetered = allowMetered
                self.meteredInterfaces = meteredInterfaces
                self.waitingTasks = waitingTasks
            }
        }

        public init(
            pid: Int32,
            version: String,
            startedAt: Date,
            uptimeSeconds: Double,
            home: String,
            socket: String,
            store: String,
            listen: String?,
            directory: String? = nil,
            tasks: [String: Int],
            running: Int,
            waiting: Int,
            bytesPerSecond: Double,
            maxConcurrentDownloads: Int,
            maxDownloadsPerHost: Int,
            maxConnectionsPerHost: Int,
            eventStreams: Int,
            network: Network? = nil
        ) {
            self.network = network
            self.pid = pid
            self.version = version
            self.startedAt = startedAt
            self.uptimeSeconds = uptimeSeconds
            self.home = home
            self.socket = socket
            self.store = store
            self.listen = listen
            self.directory = directory
            self.tasks = tasks
            self.running = running
            self.waiting = waiting
            self.bytesPerSecond = bytesPerSecond
            self.maxConcurrentDownloads = maxConcurrentDownloads
            self.maxDownloadsPerHost = maxDownloadsPerHost
            self.maxConnectionsPerHost = maxConnectionsPerHost
            self.eventStreams = eventStreams
        }
    }

    /// `POST /v1/login-links`: a one-time link that logs a browser into the dashboard.
    public struct LoginLink: Codable, Sendable, Equatable {
        /// `http://HOST:PORT/#login=…`: the code in the fragment, which the browser never
        /// sends to a server; the page spends it. It works once.
        public var url: String
        public var expiresAt: Date

        public init(url: String, expiresAt: Date) {
            self.url = url
            self.expiresAt = expiresAt
        }
    }

    /// `GET /v1/sessions`: one session.
    public struct Session: Codable, Sendable, Equatable {
        public var name: String
        public var tasks: Int
        /// Events logged and not yet acknowledged by a client.
        public var pendingEvents: Int

        public init(name: String, tasks: Int, pendingEvents: Int) {
            self.name = name
            self.tasks = tasks
            self.pendingEvents = pendingEvents
        }
    }

    /// The body of every error response.
    public struct Failure: Codable, Sendable, Error {
        /// One readable line.
        public var error: String
        /// A ``HaulError/Code`` name, e.g. `invalidArgument`.
        public var code: String

        public init(error: String, code: String) {
            self.error = error
            self.code = code
        }
    }
}
