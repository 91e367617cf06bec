import Foundation
import Haul
import Logging
import PostgresNIO

/// How a node takes leases in the fleet's queue: within its own capacity (its `-j` and
/// per-host limit), within the fleet's caps over all nodes, and — when there is less work
/// waiting than room for it — only its part of that work, in proportion to its free
/// capacity among the nodes alive, so that work spreads over every node instead of going
/// to whichever asks first.
///
/// Admission is serialised by a transaction-scoped advisory lock, so the caps hold however
/// many nodes ask at once; the candidate rows are locked `FOR UPDATE SKIP LOCKED`, never
/// waited for, and leased only up to the first that another transaction is writing (a
/// re-add, a pause under way), so that the queue's order holds: that one is leased at the
/// next look, before those behind it.
struct FleetAdmission {
    let client: PostgresClient
    let node: String
    let logger: Logger

    /// The advisory lock key of admission (``PostgresSchema`` has the others).
    static let lock: Int64 = 0x4841_554c_0002

    /// Waiting tasks are counted up to the fleet's free room (this node's capacity and the
    /// other nodes' free downloads), and never past this many: work beyond that is work for
    /// every node, and a count of a long queue at each admission costs a scan of it.
    static let countedWaiting = 10_000

    /// What admission weighs, read under its lock: this node's limits, the fleet's caps, the
    /// leases running, the other nodes' free capacity and the work waiting. No I/O: tested
    /// on its own.
    struct Room: Sendable, Equatable {
        /// This node's name and own limits.
        var node: String
        var capacity: Int
        var perHost: Int
        /// The fleet's caps over all nodes (nil: none).
        var fleetCap: Int?
        var fleetPerHost: Int?
        /// Leases running per host: over the fleet, and this node's.
        var running: [String: Int] = [:]
        var mine: [String: Int] = [:]
        /// Downloads each other node alive could still take (its capacity less its leases).
        var others: [String: Int] = [:]
        /// Tasks waiting in the queue, counted up to `capacity + othersFree` (then: at least
        /// as many as the fleet has room for) and at most ``FleetAdmission/countedWaiting``.
        var waiting = 0

        /// This node has wanted work and been given none for a lease's time: it takes one of
        /// the tasks waiting even when they are other nodes' parts. A part left to a node that
        /// does not take it (its per-host limit refuses the task's host, its loop stalls)
        /// waits that long, not for ever.
        var overdue = false

        var othersFree: Int { others.values.reduce(0, +) }

        /// How many leases this node may take now, at most `wanted`.
        func leases(wanted: Int) -> Int {
            let held = mine.values.reduce(0, +)
            let free = max(0, capacity - held)
            var room = min(wanted, free)
            var available = waiting >= FleetAdmission.countedWaiting ? Int.max : waiting
            if let fleetCap {
                let fleetRoom = fleetCap - running.values.reduce(0, +)
                room = min(room, fleetRoom)
                available = min(available, fleetRoom)
            }
            // Less work than room for it: this node's part, by its free capacity among all
            // the nodes' (the caps above still bound the sum).
            if available < free + othersFree {
                var frees = others
                frees[node] = free
                let part = FleetAdmission.part(of: max(0, available), among: frees, for: node)
                room = min(room, overdue && available > 0 ? max(part, 1) : part)
            }
            return max(0, room)
        }

        /// Whether a task of `host` may be leased next; if so, it counts as running.
        mutating func admits(_ host: String) -> Bool {
            guard mine[host, default: 0] < perHost else { return false }
            if let fleetPerHost, running[host, default: 0] >= fleetPerHost { return false }
            mine[host, default: 0] += 1
            running[host, default: 0] += 1
            return true
        }
    }

    /// `node`'s part of `available` tasks shared among the nodes by their free capacity
    /// (`free`, by name): a whole part in proportion to its own, and one more for each of the
    /// tasks those whole parts leave over, to the largest remainders (ties: the most free,
    /// then the first name). Every node weighs the same numbers under admission's lock, so
    /// the parts add up to `available` and the node that asks first does not take another
    /// node's part: the one with the most room takes the last task.
    static func part(of available: Int, among free: [String: Int], for node: String) -> Int {
        let total = free.values.reduce(0, +)
        guard available > 0, total > 0, let own = free[node], own > 0 else { return 0 }
        // Exact, however large the capacities: available × free / total in full width.
        let shares = free.map { name, free in
            let (whole, rest) = total.dividingFullWidth(available.multipliedFullWidth(by: max(0, free)))
            return (name: name, free: free, whole: whole, rest: rest)
        }
        let left = available - shares.reduce(0) { $0 + $1.whole }
        let ranked = shares.sorted { lhs, rhs in
            if lhs.rest != rhs.rest { return lhs.rest > rhs.rest }
            if lhs.free != rhs.free { return lhs.free > rhs.free }
            return lhs.name < rhs.name
        }
        let whole = shares.first { $0.name == node }?.whole ?? 0
        return whole + (ranked.prefix(left).contains { $0.name == node } ? 1 : 0)
    }

    /// This node's part of the fleet's rate `cap` (bytes per second), shared among the nodes
    /// transferring — this one (its own limit `own`, nil for none) and `others` (theirs) —
    /// evenly, except that a node whose own limit is under its even part takes only that, and
    /// leaves the rest to the others (water-filling). At least 1.
    static func rateShare(cap: Int64, own: Int64?, others: [Int64?]) -> Int64 {
        // Ascending by own limit, none last; this node first among equals.
        var nodes = ([(own, true)] + others.map { ($0, false) }).sorted { lhs, rhs in
            switch (lhs.0, rhs.0) {
            case (let a?, let b?): a != b ? a < b : lhs.1
            case (nil, nil): lhs.1
            case (_?, nil): true
            case (nil, _?): false
            }
        }
        var remaining = cap
        while let (limit, isThis) = nodes.first {
            let even = remaining / Int64(nodes.count)
            let part = limit.map { min($0, even) } ?? even
            if isThis { return max(1, part) }
            remaining -= part
            nodes.removeFirst()
        }
        return max(1, remaining)
    }

    /// Takes leases for this node on the next tasks of the queue, as ``Room`` allows. A
    /// lease that ran out is counted as free (its task is first in line again, at its old
    /// place); a task waiting to be tried again whose node died goes back to the line.
    /// Tasks in `excluding` are passed over (those this node still runs, or is stopping).
    func acquire(
        wanted: Int,
        capacity: Int,
        perHost: Int,
        seconds: Double,
        excluding: [UUID],
        publishing newCapacity: Bool,
        overdue: Bool
    ) async throws -> [FleetQueue.Lease] {
        try await client.withCheckedTransaction(logger: logger) { connection in
            // The queue's rows change state several times each, faster than autovacuum runs
            // after a large add: index entries of versions no longer live pile up. A plain
            // index scan marks those it finds dead, and later scans skip them; a bitmap scan
            // never does, and visits every such row again at each admission (and with
            // statistics from before the add, the planner takes one, sorting thousands of
            // rows for the first few). So, in this transaction only, none.
            _ = try await connection.checkedQuery(
                "SELECT pg_advisory_xact_lock(\(Self.lock)), set_config('enable_bitmapscan', 'off', true)",
                logger: logger
            )
            try await reclaim(seconds: seconds, on: connection)
            if newCapacity {
                _ = try await connection.checkedQuery(
                    "UPDATE fleet_node SET max_running = \(capacity) WHERE name = \(node)",
                    logger: logger
                )
            }
            var room = Room(node: node, capacity: capacity, perHost: perHost, overdue: overdue)
            try await count(&room, seconds: seconds, excluding: excluding, on: connection)
            let wanted = room.leases(wanted: wanted)
            guard wanted > 0 else { return [] }
            let picked = try await next(wanted, room: room, excluding: excluding, on: connection)
            guard !picked.isEmpty else { return [] }
            var leases: [FleetQueue.Lease] = []
            for try await (id, fence, expires) in try await connection.checkedQuery(
                """
                UPDATE haul_task SET state = 'running', owner = \(node),
                    lease_expires = now() + make_interval(secs => \(seconds)), fence = fence + 1,
                    leased_at = now()
                WHERE id = ANY(\(picked))
                RETURNING id, fence, lease_expires
                """,
                logger: logger
            ).decode((UUID, Int64, Date).self) {
                leases.append(FleetQueue.Lease(task: id, fence: fence, expires: expires))
            }
            // In queue order, as picked.
            let place = Dictionary(uniqueKeysWithValues: picked.enumerated().map { ($1, $0) })
            return leases.sorted { place[$0.task, default: .max] < place[$1.task, default: .max] }
        }
    }

    /// In one statement: leases that ran out give their tasks back to the queue, at their
    /// places; a task waiting to be tried again — its timer on the node that set it, which
    /// may have died — waits in the queue again two leases past its next try.
    private func reclaim(seconds: Double, on connection: PostgresConnection) async throws {
        let overdue = Date().addingTimeInterval(-2 * seconds)
        _ = try await connection.checkedQuery(
            """
            WITH expired AS (
                UPDATE haul_task SET state = 'queued', owner = NULL, lease_expires = NULL
                WHERE id IN (
                    SELECT id FROM haul_task
                    WHERE owner IS NOT NULL AND state = 'running' AND lease_expires <= now()
                    ORDER BY id FOR UPDATE SKIP LOCKED
                )
                RETURNING 1
            ), due AS (
                UPDATE haul_task SET state = 'queued'
                WHERE id IN (
                    SELECT id FROM haul_task
                    WHERE state = 'retrying' AND background AND "nextTryAt" IS NOT NULL
                        AND "nextTryAt" < \(overdue)
                    ORDER BY id FOR UPDATE SKIP LOCKED
                )
                RETURNING 1
            )
            SELECT (SELECT count(*) FROM expired) + (SELECT count(*) FROM due)
            """,
            logger: logger
        )
    }

    /// Fills in what `room` weighs: the running leases per host (the fleet's and this
    /// node's), the fleet's caps, the other nodes' free capacity, and the work waiting.
    private func count(
        _ room: inout Room,
        seconds: Double,
        excluding: [UUID],
        on connection: PostgresConnection
    ) async throws {
        for try await (host, all, mine) in try await connection.checkedQuery(
            """
            SELECT host, count(*), count(*) FILTER (WHERE owner = \(node))
            FROM haul_task WHERE state = 'running' AND owner IS NOT NULL GROUP BY host
            """,
            logger: logger
        ).decode((String, Int, Int).self) {
            room.running[host] = all
            if mine > 0 { room.mine[host] = mine }
        }
        for try await (fleetCap, fleetPerHost, names, frees, waiting) in try await connection.checkedQuery(
            """
            WITH others AS (
                SELECT n.name, GREATEST(0, n.max_running - (
                        SELECT count(*) FROM haul_task t
                        WHERE t.owner = n.name AND t.state = 'running' AND t.lease_expires > now()))::bigint
                    AS free
                FROM fleet_node n
                WHERE n.name <> \(node) AND n.stopped_at IS NULL AND n.draining_at IS NULL
                    AND n.heartbeat_at > now() - make_interval(secs => \(seconds))
            )
            SELECT
                (SELECT value FROM haul_setting WHERE name = 'fleetMaxConcurrentDownloads' AND value > 0),
                (SELECT value FROM haul_setting WHERE name = 'fleetMaxDownloadsPerHost' AND value > 0),
                (SELECT array_agg(name ORDER BY name) FROM others),
                (SELECT array_agg(free ORDER BY name) FROM others),
                (SELECT count(*) FROM (
                    SELECT 1 FROM haul_task WHERE state = 'queued' AND background
                        AND id <> ALL(\(excluding)::uuid[])
                    LIMIT (SELECT LEAST(\(Int64(Self.countedWaiting)), COALESCE(sum(free), 0) + \(Int64(room.capacity)))
                        FROM others)
                ) waiting)
            """,
            logger: logger
        ).decode((Int64?, Int64?, [String]?, [Int64]?, Int).self) {
            room.fleetCap = fleetCap.map { Int(clamping: $0) }
            room.fleetPerHost = fleetPerHost.map { Int(clamping: $0) }
            for (name, free) in zip(names ?? [], frees ?? []) { room.others[name] = Int(clamping: free) }
            room.waiting = waiting
        }
    }

    /// The next `wanted` waiting tasks in queue order that `room`'s per-host limits let
    /// start, locked for the lease. Only as far as the first that another transaction holds
    /// (a re-add, a pause under way): one passed over would start after tasks queued behind
    /// it; it is taken at the next look instead.
    private func next(
        _ wanted: Int,
        room: Room,
        excluding: [UUID],
        on connection: PostgresConnection
    ) async throws -> [UUID] {
        var (wanted, room) = (wanted, room)
        // A window of the line, enough to look past hosts at their cap (bounded: `wanted`
        // and the limits come from outside).
        let window = max(min(wanted, 10_000) * 8, 256)
        var picked: [UUID] = []
        for try await (id, host) in try await connection.checkedQuery(
            """
            SELECT id, host FROM haul_task
            WHERE state = 'queued' AND background AND id <> ALL(\(excluding)::uuid[])
            ORDER BY priority DESC, "queueOrder" LIMIT \(window)
            """,
            logger: logger
        ).decode((UUID, String).self) {
            guard wanted > 0, room.admits(host) else { continue }
            picked.append(id)
            wanted -= 1
        }
        guard !picked.isEmpty else { return [] }
        var free: Set<UUID> = []
        for try await id in try await connection.checkedQuery(
            """
            SELECT id FROM haul_task WHERE id = ANY(\(picked)::uuid[]) AND state = 'queued'
            ORDER BY id FOR UPDATE SKIP LOCKED
            """,
            logger: logger
        ).decode(UUID.self) {
            free.insert(id)
        }
        return Array(picked.prefix { free.contains($0) })
    }
}
