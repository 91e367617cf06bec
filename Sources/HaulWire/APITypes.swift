import Foundation

/// The JSON bodies of the daemon's HTTP API. Every endpoint is listed in docs/daemon.md.
public enum API {
    /// The API's version prefix.
    public static let prefix = "/v1"

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
    }

    /// `GET`/`PUT /v1/settings`: the limits, changed live. In a fleet, the downloads,
    /// connections and rate limit are a node's own (this daemon's, or `?node=NAME`'s), the
    /// others the whole fleet's, and ``fleet`` holds its caps over all nodes.
    public struct Settings: Codable, Sendable, Equatable {
        /// In a fleet: the node whose limits these are (answers only).
        public var node: String?
        /// In a fleet: its caps over all nodes together.
        public var fleet: FleetCaps?
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
            lowestSpeedTime: Int64? = nil,
            node: String? = nil,
            fleet: FleetCaps? = nil
        ) {
            self.node = node
            self.fleet = fleet
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
        /// The error's code name, e.g. `invalidArgument`.
        public var code: String

        public init(error: String, code: String) {
            self.error = error
            self.code = code
        }
    }
}

extension API {
    /// The fleet's caps over all its nodes together (`haul set --fleet`, the `fleet` of
    /// `PUT /v1/settings`), over each node's own limits. Absent, or 0 when set, for none.
    public struct FleetCaps: Codable, Sendable, Equatable {
        /// Downloads at once over every node.
        public var maxConcurrentDownloads: Int?
        /// Downloads at once against one host, over every node.
        public var maxDownloadsPerHost: Int?
        /// Bytes per second over every node together, shared among the nodes transferring.
        public var overallRateLimit: Int64?

        public init(maxConcurrentDownloads: Int? = nil, maxDownloadsPerHost: Int? = nil, overallRateLimit: Int64? = nil)
        {
            self.maxConcurrentDownloads = maxConcurrentDownloads
            self.maxDownloadsPerHost = maxDownloadsPerHost
            self.overallRateLimit = overallRateLimit
        }
    }
}

extension API {
    /// `POST /v1/fleet/nodes/{name}/drain`: a drain asked of a fleet's node.
    public struct Drain: Codable, Sendable, Equatable {
        /// The node asked (answers only; the path names it).
        public var node: String?
        /// Let its downloads finish before it stops, instead of handing them back at a
        /// checkpoint (default false).
        public var finishing: Bool?

        public init(node: String? = nil, finishing: Bool? = nil) {
            self.node = node
            self.finishing = finishing
        }
    }
}
