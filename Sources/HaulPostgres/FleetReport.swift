import Foundation
import HaulWire
import HaulWireMapping
import Logging
import PostgresNIO

/// What the fleet holds now, read from the database: its nodes with their leases and speed
/// (`haul status`), its queue in order, and its tasks counted by state.
public struct FleetReport: Sendable {
    let client: PostgresClient
    let logger: Logger

    /// A task as the fleet sees it.
    public struct Entry: Sendable, Equatable {
        public var id: UUID
        /// `host:port`, for the per-host cap.
        public var host: String
        public var priority: Int
        public var state: String
        public var owner: String?
        public var fence: Int64
        public var committed: Int64
    }

    /// A daemon of the fleet, as `haul status` shows it.
    public typealias Node = API.Status.Fleet.Node

    /// The fleet's nodes, by name, with the leases each holds now.
    public func nodes() async throws -> [Node] {
        try await Postgres.run("read the fleet's nodes") {
            var nodes: [Node] = []
            for try await (name, started, beat, speed, stopped, leases, capacity, rate, draining)
                in try await self.client
                .query(
                    """
                    SELECT n.name, n.started_at, n.heartbeat_at, n.bytes_per_second, n.stopped_at,
                        (SELECT count(*) FROM haul_task t
                         WHERE t.owner = n.name AND t.state = 'running' AND t.lease_expires > now()),
                        n.max_running, NULLIF(n.rate_limit, 0), n.draining_at
                    FROM fleet_node n ORDER BY n.name
                    """,
                    logger: self.logger
                ).decode((String, Date, Date, Double, Date?, Int, Int, Int64?, Date?).self)
            {
                nodes.append(
                    Node(
                        name: name,
                        startedAt: started,
                        heartbeatAt: beat,
                        bytesPerSecond: speed,
                        leases: leases,
                        stoppedAt: stopped,
                        maxConcurrentDownloads: capacity > 0 ? capacity : nil,
                        overallRateLimit: rate,
                        drainingSince: draining
                    )
                )
            }
            return nodes
        }
    }

    /// How many of the daemons' tasks are in each state (`queued`, `running`, …).
    public func stateCounts() async throws -> [String: Int] {
        try await Postgres.run("count the fleet's tasks") {
            var counts: [String: Int] = [:]
            for try await (state, count) in try await self.client.query(
                "SELECT state, count(*) FROM haul_task WHERE background GROUP BY state",
                logger: self.logger
            ).decode((String, Int).self) {
                counts[state] = count
            }
            return counts
        }
    }

    /// Every task, in queue order.
    public func entries() async throws -> [Entry] {
        try await Postgres.run("read the fleet's queue") {
            var entries: [Entry] = []
            for try await (id, host, priority, state, owner, fence, committed) in try await self.client.query(
                """
                SELECT t.id, t.host, t.priority::integer, t.state, t.owner, t.fence,
                    COALESCE((SELECT SUM(s.committed - s.start) FROM haul_segment s WHERE s."taskID" = t.id), 0)::bigint
                FROM haul_task t WHERE t.background ORDER BY t."queueOrder"
                """,
                logger: self.logger
            ).decode((UUID, String, Int, String, String?, Int64, Int64).self) {
                entries.append(
                    Entry(
                        id: id,
                        host: host,
                        priority: priority,
                        state: state,
                        owner: owner,
                        fence: fence,
                        committed: committed
                    )
                )
            }
            return entries
        }
    }
}
