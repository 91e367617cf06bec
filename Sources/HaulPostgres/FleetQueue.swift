import Foundation
import Haul
import HaulDaemon
import Logging
import PostgresNIO

/// The fleet's queue in PostgreSQL: which daemon (node) runs which task, by leases with
/// fencing tokens held on the tasks' own rows (`haul_task`'s `owner`, `fence` and
/// `lease_expires`), so that a task's state and its lease change together.
///
/// - A node runs a task only while it holds the task's **lease**: taken in queue order
///   (priority, then the order queued: the seeds' oldest-first rule, fleet-wide), renewed
///   by a heartbeat, expiring after a set time. Times are the database's (`now()`), so the
///   nodes' clocks do not matter.
/// - Each acquisition increments the task's **fence**. Every write a node makes about a
///   task it runs (``PostgresStore``'s checkpoints and states, a renewal, a release) names
///   the fence it holds and counts only while that is still the task's fence, the task is
///   running and its lease has not expired: a node stopped past its lease (SIGSTOP, a long
///   pause, a partition from the database) can write nothing once another has taken over,
///   and learns so from the answer.
/// - Each node takes leases within its own capacity and the fleet's caps, its part of the
///   work by free capacity (``FleetAdmission``).
public final class FleetQueue: Sendable {
    /// A node's hold on a task.
    public struct Lease: Sendable, Hashable {
        public let task: UUID
        /// The task's fencing token when this lease was taken.
        public let fence: Int64
        /// When it runs out, by the database's clock.
        public let expires: Date
    }

    let client: PostgresClient
    /// This daemon's name (`--node`, default the host name).
    public let node: String
    let logger: Logger

    /// - Throws: ``HaulError/Code/invalidArgument`` for a node name that is not 1 to 64
    ///   letters, digits, `.`, `_` or `-` (a host name is one).
    public init(client: PostgresClient, node: String, logger: Logger) throws {
        try Self.validateNodeName(node)
        self.client = client
        self.node = node
        self.logger = logger
    }

    /// The host name, as a node name when none is given (else "haul").
    public static var defaultNode: String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "haul" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return DownloadRequest.isPlainName(name, maxLength: 64) ? name : "haul"
    }

    /// Checks a node's name (`--node`): 1 to 64 letters, digits, `.`, `_` or `-`.
    public static func validateNodeName(_ name: String) throws {
        try DownloadRequest.validateNodeName(name)
    }

    // MARK: Schema

    /// The schema's migrations (``PostgresSchema``), shared with ``PostgresStore``.
    static var migrations: [[String]] { PostgresSchema.migrations }

    /// Creates or upgrades the schema (``PostgresSchema/migrate(_:logger:)``).
    public func migrate() async throws {
        try await PostgresSchema.migrate(client, logger: logger)
    }

    // MARK: The queue

    /// Takes leases for this node on the next tasks of the queue (the daemons' tasks that
    /// wait), as ``FleetAdmission`` allows: within this node's `capacity` (downloads at once)
    /// and `perHost`, within the fleet's caps, and its part of the work by free capacity;
    /// at most `wanted`. `newCapacity`: the capacity changed since this node last said it
    /// (then it is said even when nothing is wanted). `overdue`: this node has wanted work
    /// and been given none for a lease's time (``FleetAdmission/Room/overdue``).
    ///
    /// Tasks in `excluding` are passed over (those this node still runs, or is stopping: a
    /// lease of theirs that ran out must not come back to the run that lost it).
    public func acquire(
        wanted: Int,
        capacity: Int,
        perHost: Int,
        duration: Duration,
        excluding: [UUID] = [],
        newCapacity: Bool = true,
        overdue: Bool = false
    ) async throws -> [Lease] {
        guard wanted > 0 || newCapacity, wanted >= 0, capacity > 0, perHost > 0 else { return [] }
        let admission = FleetAdmission(client: client, node: node, logger: logger)
        return try await store("take leases in the fleet's queue") {
            try await admission.acquire(
                wanted: wanted,
                capacity: capacity,
                perHost: perHost,
                seconds: Self.seconds(duration),
                excluding: excluding,
                publishing: newCapacity,
                overdue: overdue
            )
        }
    }

    /// Gives a task back to the queue at its place (a node stopping cleanly), if `lease`
    /// still holds it; false when it does not: nothing was written.
    public func release(_ lease: Lease) async throws -> Bool {
        try await store("give a lease back") {
            // One transaction with its note, so that running it again (a conflict) is safe.
            try await self.client.withCheckedTransaction(logger: self.logger) { connection in
                var released = false
                for try await _ in try await connection.checkedQuery(
                    """
                    UPDATE haul_task SET state = 'queued', owner = NULL, lease_expires = NULL
                    WHERE id = \(lease.task) AND fence = \(lease.fence) AND owner = \(self.node)
                        AND state = 'running' AND lease_expires > now()
                    RETURNING id
                    """,
                    logger: self.logger
                ) {
                    released = true
                }
                if released { try await FleetSignals.send(.queue, on: connection, logger: self.logger) }
                return released
            }
        }
    }

    /// Sends tasks running over the fleet's caps back to waiting, at their places in the
    /// queue: beyond its per-host cap on a host, then beyond its cap in all, the most
    /// recently started first (by when their lease was taken, then queue order), as one
    /// machine's scheduler does when its limit is lowered. Their leases end here; the nodes
    /// running them hear so at once (a note per task) and stop. Answers the tasks sent back.
    /// (A node's own limits, lowered, it applies itself.)
    public func sendBackOverCaps() async throws -> [UUID] {
        let none = Int64(1) << 62
        return try await store("send tasks over the fleet's caps back to waiting") {
            try await self.client.withCheckedTransaction(logger: self.logger) { connection in
                // Under the admission lock: no lease is taken meanwhile.
                _ = try await connection.checkedQuery(
                    "SELECT pg_advisory_xact_lock(\(FleetAdmission.lock))",
                    logger: self.logger
                )
                // The running rows locked in id order, as every writer of many locks them.
                _ = try await connection.checkedQuery(
                    "SELECT id FROM haul_task WHERE state = 'running' AND owner IS NOT NULL ORDER BY id FOR UPDATE",
                    logger: self.logger
                )
                var sent: [UUID] = []
                for try await id in try await connection.checkedQuery(
                    """
                    WITH running AS (
                        SELECT id, leased_at, priority, "queueOrder",
                            row_number() OVER (
                                PARTITION BY host ORDER BY leased_at NULLS FIRST, priority DESC, "queueOrder"
                            ) AS in_host
                        FROM haul_task
                        WHERE state = 'running' AND owner IS NOT NULL AND lease_expires > now()
                    ),
                    kept AS (
                        SELECT id FROM (
                            SELECT id, row_number() OVER (
                                ORDER BY leased_at NULLS FIRST, priority DESC, "queueOrder"
                            ) AS overall
                            FROM running WHERE in_host <= COALESCE((
                                SELECT value FROM haul_setting WHERE name = 'fleetMaxDownloadsPerHost' AND value > 0
                            ), \(none))
                        ) within_hosts WHERE overall <= COALESCE((
                            SELECT value FROM haul_setting WHERE name = 'fleetMaxConcurrentDownloads' AND value > 0
                        ), \(none))
                    )
                    UPDATE haul_task SET state = 'queued', owner = NULL, lease_expires = NULL
                    WHERE id IN (SELECT id FROM running) AND id NOT IN (SELECT id FROM kept)
                    RETURNING id
                    """,
                    logger: self.logger
                ).decode(UUID.self) {
                    sent.append(id)
                }
                for id in sent { try await FleetSignals.send(.task(id), on: connection, logger: self.logger) }
                return sent
            }
        }
    }

    // MARK: Nodes

    /// Says this node is alive, with its speed, and renews `leases` (those it holds, as far
    /// as it knows) in one statement: one round trip a beat, however many it runs. Answers
    /// the leases it still holds; one of `leases` missing from the answer was lost — stop
    /// that transfer, write nothing more about it. A lease this node's row names but
    /// `leases` does not is left to run out: no run here holds it.
    /// `capacity`: how many downloads this node runs at once (its `-j`), for the other
    /// nodes' share of the work; `rateLimit` its own limit on them all (nil for none), for
    /// their share of the fleet's rate cap.
    public func heartbeat(
        bytesPerSecond: Double,
        capacity: Int = 0,
        rateLimit: Int64? = nil,
        duration: Duration,
        renewing leases: [Lease]
    ) async throws -> [Lease] {
        let seconds = Self.seconds(duration)
        let speed = bytesPerSecond.isFinite ? max(0, bytesPerSecond) : 0
        let ids = leases.map(\.task)
        let fences = leases.map(\.fence)
        return try await store("renew this node's leases") {
            try await self.client.withCheckedTransaction(logger: self.logger) { connection in
                _ = try await connection.checkedQuery(
                    """
                    INSERT INTO fleet_node (name, bytes_per_second, max_running, rate_limit)
                    VALUES (\(self.node), \(speed), \(capacity), \(rateLimit ?? 0))
                    ON CONFLICT (name) DO UPDATE SET heartbeat_at = now(), bytes_per_second = \(speed),
                        max_running = \(capacity), rate_limit = \(rateLimit ?? 0), stopped_at = NULL
                    """,
                    logger: self.logger
                )
                guard !ids.isEmpty else { return [] }
                // Rows locked in id order, as every writer of many task rows locks them.
                var held: [Lease] = []
                for try await (id, fence, expires) in try await connection.checkedQuery(
                    """
                    UPDATE haul_task AS t SET lease_expires = now() + make_interval(secs => \(seconds))
                    FROM unnest(\(ids)::uuid[], \(fences)::bigint[]) AS l(id, fence)
                    WHERE t.id = l.id AND t.fence = l.fence AND t.owner = \(self.node)
                        AND t.state = 'running' AND t.lease_expires > now()
                        AND t.id IN (SELECT id FROM haul_task WHERE id = ANY(\(ids)::uuid[]) ORDER BY id FOR UPDATE)
                    RETURNING t.id, t.fence, t.lease_expires
                    """,
                    logger: self.logger
                ).decode((UUID, Int64, Date).self) {
                    held.append(Lease(task: id, fence: fence, expires: expires))
                }
                return held
            }
        }
    }

    /// This node's part of the fleet's rate cap, with its own limit `own` (nil for none):
    /// shared with the other nodes alive that hold leases (``FleetAdmission/rateShare(cap:own:others:)``);
    /// nil when the fleet has no rate cap.
    public func rateShare(own: Int64?, duration: Duration) async throws -> Int64? {
        let seconds = Self.seconds(duration)
        return try await store("read the fleet's rate cap") {
            var cap: Int64?
            for try await value in try await self.client.query(
                "SELECT value FROM haul_setting WHERE name = 'fleetRateLimit' AND value > 0",
                logger: self.logger
            ).decode(Int64.self) {
                cap = value
            }
            guard let cap else { return nil }
            var others: [Int64?] = []
            for try await limit in try await self.client.query(
                """
                SELECT NULLIF(f.rate_limit, 0) FROM fleet_node f
                WHERE f.name <> \(self.node) AND f.stopped_at IS NULL
                    AND f.heartbeat_at > now() - make_interval(secs => \(seconds))
                    AND EXISTS (SELECT 1 FROM haul_task t WHERE t.owner = f.name AND t.state = 'running'
                        AND t.lease_expires > now())
                """,
                logger: self.logger
            ).decode(Int64?.self) {
                others.append(limit)
            }
            return FleetAdmission.rateShare(cap: cap, own: own, others: others)
        }
    }

    /// Joins the fleet as this node starts: running from now on, any drain asked of its
    /// last run done with.
    public func join() async throws {
        try await store("join the fleet") {
            _ = try await self.client.query(
                """
                INSERT INTO fleet_node (name) VALUES (\(self.node))
                ON CONFLICT (name) DO UPDATE SET started_at = now(), heartbeat_at = now(), stopped_at = NULL,
                    draining_at = NULL, drain_finishing = false
                """,
                logger: self.logger
            )
        }
    }

    /// Asks node `node` to drain (see ``FleetView/requestDrain(of:finishing:)``), and tells it.
    /// - Throws: ``HaulError/Code/notFound`` for a node that is not running in the fleet
    ///   (unknown, gone silent for a lease, or left).
    public func requestDrain(of node: String, finishing: Bool, duration: Duration) async throws {
        let seconds = Self.seconds(duration)
        let asked = try await store("ask a node to drain") {
            try await self.client.withCheckedTransaction(logger: self.logger) { connection in
                var asked = false
                for try await _ in try await connection.checkedQuery(
                    """
                    UPDATE fleet_node SET draining_at = COALESCE(draining_at, now()), drain_finishing = \(finishing)
                    WHERE name = \(node) AND stopped_at IS NULL
                        AND heartbeat_at > now() - make_interval(secs => \(seconds))
                    RETURNING name
                    """,
                    logger: self.logger
                ) {
                    asked = true
                }
                if asked { try await FleetSignals.send(.drain(node: node), on: connection, logger: self.logger) }
                return asked
            }
        }
        guard asked else {
            throw HaulError(
                .notFound,
                "No node '\(node.prefix(80))' is running in this fleet",
                hint: "haul status lists the nodes and their states"
            )
        }
    }

    /// The drain asked of this node: nil for none, else whether it lets its downloads finish first.
    public func drainRequest() async throws -> Bool? {
        try await store("read this node's state") {
            var request: Bool?
            for try await finishing in try await self.client.query(
                "SELECT drain_finishing FROM fleet_node WHERE name = \(self.node) AND draining_at IS NOT NULL",
                logger: self.logger
            ).decode(Bool.self) {
                request = finishing
            }
            return request
        }
    }

    /// Leaves the fleet cleanly: every lease this node holds goes back to the queue at once
    /// (at its place, its checkpoint kept), so other nodes continue those tasks without
    /// waiting for the leases to run out. Answers how many were given back.
    @discardableResult
    public func leave() async throws -> Int {
        try await store("give this node's leases back") {
            try await self.client.withCheckedTransaction(logger: self.logger) { connection in
                var released = 0
                for try await _ in try await connection.checkedQuery(
                    """
                    UPDATE haul_task SET state = 'queued', owner = NULL, lease_expires = NULL
                    WHERE owner = \(self.node) AND state = 'running'
                    RETURNING id
                    """,
                    logger: self.logger
                ) {
                    released += 1
                }
                if released > 0 { try await FleetSignals.send(.queue, on: connection, logger: self.logger) }
                _ = try await connection.checkedQuery(
                    """
                    UPDATE fleet_node SET stopped_at = now(), bytes_per_second = 0, draining_at = NULL,
                        drain_finishing = false
                    WHERE name = \(self.node)
                    """,
                    logger: self.logger
                )
                return released
            }
        }
    }

    /// What the fleet holds now: its nodes, its queue, its counts.
    public var report: FleetReport { FleetReport(client: client, logger: logger) }

    // MARK: Support

    static func seconds(_ duration: Duration) -> Double {
        let parts = duration.components
        return max(0.001, Double(parts.seconds) + Double(parts.attoseconds) / 1e18)
    }

    /// Runs a database operation; a failure is one sentence naming what was being done.
    private func store<T>(_ what: String, _ body: () async throws -> T) async throws -> T {
        try await Postgres.run(what, body)
    }
}
