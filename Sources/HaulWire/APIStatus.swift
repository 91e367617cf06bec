import Foundation

/// The body of `GET /v1/status`.
extension API {
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
            /// The fleet's caps over all nodes together (each absent: none).
            public var caps: FleetCaps?

            public init(node: String, store: String, leaseSeconds: Double, nodes: [Node], caps: FleetCaps? = nil) {
                self.caps = caps
                self.node = node
                self.store = store
                self.leaseSeconds = leaseSeconds
                self.nodes = nodes
            }

            /// A daemon of the fleet.
            public struct Node: Codable, Sendable, Equatable {
                /// The states a node is shown in.
                public static let states = ["running", "draining", "gone", "left"]

                /// Its state at `now`: left (stopped cleanly), gone (silent for more than a
                /// lease: it died or lost the database), draining, or running.
                public func state(at now: Date, leaseSeconds: Double) -> String {
                    if stoppedAt != nil { return "left" }
                    if now.timeIntervalSince(heartbeatAt) > leaseSeconds { return "gone" }
                    return drainingSince != nil ? "draining" : "running"
                }

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
                /// How many downloads it runs at once (its own `-j`), as it last said.
                public var maxConcurrentDownloads: Int?
                /// Its own limit on all its downloads together (its link), bytes per second;
                /// absent for none.
                public var overallRateLimit: Int64?
                /// Since when it drains (`haul daemon drain`): it takes no new download, and
                /// leaves once it has handed back or finished what it runs.
                public var drainingSince: Date?

                public init(
                    name: String,
                    startedAt: Date,
                    heartbeatAt: Date,
                    bytesPerSecond: Double,
                    leases: Int,
                    stoppedAt: Date?,
                    maxConcurrentDownloads: Int? = nil,
                    overallRateLimit: Int64? = nil,
                    drainingSince: Date? = nil
                ) {
                    self.drainingSince = drainingSince
                    self.maxConcurrentDownloads = maxConcurrentDownloads
                    self.overallRateLimit = overallRateLimit
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
}

extension API {
    /// A task, as `GET /v1/tasks`, `GET /v1/tasks/{id}` and every operation on tasks answer:
    /// URLs and error messages with their credentials redacted.
    public struct Task: Codable, Sendable, Equatable {
        public var id: UUID
        public var url: String
        /// The finished file's path, once its name is known.
        public var path: String?
        public var directory: String
        public var state: TaskState
        public var priority: Int
        /// Bytes durably on disk.
        public var bytesCommitted: Int64
        public var totalBytes: Int64?
        public var errorMessage: String?
        public var session: String
        /// The task's own rate limit, bytes per second.
        public var rateLimit: Int64?
        public var connections: Int?
        /// A retrying task's next try.
        public var nextTryAt: Date?
        /// The error's code name, e.g. `httpStatus`.
        public var errorCode: String?
        /// In fleet mode, the node running it.
        public var node: String?
        /// With mirrors: every source and what is known of it.
        public var sources: [Source]?

        public init(id: UUID, url: String, directory: String, state: TaskState, priority: Int, session: String) {
            self.id = id
            self.url = url
            self.directory = directory
            self.state = state
            self.priority = priority
            self.bytesCommitted = 0
            self.session = session
        }

        /// One source of a download with mirrors.
        public struct Source: Codable, Sendable, Equatable {
            public var url: String
            /// Its bytes were compared with the file's and matched.
            public var verified: Bool
            /// Why it was dropped, if it was.
            public var dropped: String?
            /// Bytes it served.
            public var bytes: Int64

            public init(url: String, verified: Bool, dropped: String?, bytes: Int64) {
                self.url = url
                self.verified = verified
                self.dropped = dropped
                self.bytes = bytes
            }
        }
    }
}

extension API {
    /// `GET /v1/health`: that the daemon answers, and which one — nothing it must count,
    /// so it answers at once however many tasks it holds (clients probe with it).
    public struct Health: Codable, Sendable, Equatable {
        public var pid: Int32
        public var version: String
        /// `127.0.0.1:PORT` when a TCP listener runs.
        public var listen: String?

        public init(pid: Int32, version: String, listen: String?) {
            self.pid = pid
            self.version = version
            self.listen = listen
        }
    }
}
