import Foundation
import Logging

/// How a ``Downloader`` behaves, and where it keeps its store.
extension Downloader {
    /// How a downloader behaves. Every field has a sensible default.
    public struct Configuration: Sendable {
        /// Where the store lives.
        public var store: StoreLocation
        /// How long to wait for a connection.
        public var connectTimeout: Duration
        /// How long a connection may stay silent mid-response before it counts as failed.
        public var readTimeout: Duration
        /// The speed a connection must keep, over a time (``LowestSpeed``); nil for none.
        public var lowestSpeed: LowestSpeed?
        /// Redirects followed before giving up.
        public var maxRedirects: Int
        /// The User-Agent header.
        public var userAgent: String
        /// The longest time between checkpoints while data flows.
        public var checkpointInterval: Duration
        /// The most bytes written between checkpoints.
        ///
        /// Checkpoints are mostly paced by ``checkpointInterval``: a kill loses at most about that
        /// much transfer time. The byte bound only matters on very fast links, where an
        /// `fdatasync` every few MiB would cost more than the work it protects (measured on
        /// loopback: 8 MiB checkpoints made a 1 GiB download 25–40 % slower than 1 s ones).
        public var checkpointBytes: Int64
        /// How retryable failures are retried.
        public var retry: RetryPolicy
        /// Connections per download when the request does not say (see ``DownloadRequest/connections``).
        public var connectionsPerDownload: Int
        /// The smallest segment worth its own connection, when the request does not say.
        public var minSplitSize: Int64
        /// A limit on all downloads together, in bytes per second; nil for none. Change it
        /// while running with ``Downloader/setOverallRateLimit(_:)``.
        public var overallRateLimit: Int64?
        /// Where the library logs; silent by default.
        public var logger: Logger
        /// Whether a finished file takes the server's `Last-Modified` as its modification time
        /// (wget's default, curl's `-R`); false keeps the time it was written.
        public var setsRemoteTime = true
        /// Whether a finished file records where it came from in the `user.xdg.origin.url`
        /// extended attribute (the freedesktop.org convention wget's `--xattr` follows), where
        /// the file system keeps extended attributes. The URL is written without credentials,
        /// and with secret-looking query values hidden.
        public var setsOriginAttribute = true
        /// The clock downloads measure and wait by: rates, checkpoints, retry delays, the
        /// speed floor. A test gives a clock it moves itself.
        public var clock: any Clock<Duration> = ContinuousClock()

        public init(
            store: StoreLocation = .default,
            connectTimeout: Duration = .seconds(30),
            readTimeout: Duration = .seconds(60),
            maxRedirects: Int = 10,
            userAgent: String = "Haul/\(HaulVersion.current)",
            checkpointInterval: Duration = .seconds(1),
            checkpointBytes: Int64 = 256 << 20,
            retry: RetryPolicy = RetryPolicy(),
            connectionsPerDownload: Int = 4,
            minSplitSize: Int64 = 4 << 20,
            overallRateLimit: Int64? = nil,
            logger: Logger = Logger(label: "haul", factory: { _ in SwiftLogNoOpLogHandler() })
        ) {
            self.store = store
            self.connectTimeout = connectTimeout
            self.readTimeout = readTimeout
            self.maxRedirects = maxRedirects
            self.userAgent = userAgent
            self.checkpointInterval = checkpointInterval
            self.checkpointBytes = checkpointBytes
            self.retry = retry
            self.connectionsPerDownload = connectionsPerDownload
            self.minSplitSize = minSplitSize
            self.overallRateLimit = overallRateLimit
            self.logger = logger
        }
    }

    /// Where a downloader keeps its store: a SQLite file (the default), memory, or a store
    /// already opened (the PostgreSQL store daemons on several machines share is one).
    public struct StoreLocation: Sendable {
        enum Kind: Sendable {
            case path(String, readers: Store.Readers)
            case memory
            case existing(any TaskStore)
        }

        let kind: Kind

        /// `$HAUL_HOME/haul.sqlite` (see ``HaulHome``).
        public static var `default`: StoreLocation { .sqlite(at: HaulHome.resolve().storePath) }
        /// A SQLite file at `path`, read as `readers` says (see ``Store/Readers``).
        public static func sqlite(at path: String, readers: Store.Readers = .concurrent) -> StoreLocation {
            StoreLocation(kind: .path(path, readers: readers))
        }
        /// In memory only: nothing survives the process.
        public static var inMemory: StoreLocation { StoreLocation(kind: .memory) }
        /// A store already opened.
        public static func store(_ store: Store) -> StoreLocation { StoreLocation(kind: .existing(store)) }
        /// A store of any engine, already opened.
        package static func engine(_ store: any TaskStore) -> StoreLocation { StoreLocation(kind: .existing(store)) }
    }
}
