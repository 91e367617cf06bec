import Foundation
import Haul
import HaulDaemon
import HaulWire
import HaulWireMapping
import Logging
import PostgresNIO

/// The daemons' session event logs in PostgreSQL: the rules of the SQLite log (Store+EventLog
/// in HaulDaemon), shared by every node. Appends are serialised by an advisory lock, so an
/// event's id is visible only after every smaller one: a reader resuming after id N (its
/// Last-Event-ID) never skips one committed late.
extension PostgresStore: EventLogStore {
    /// The advisory lock key of appends.
    static let appendLock: Int64 = 0x4841_554c_0004

    package func appendEvents(_ records: [EventRecord]) async throws -> [EventRecord] {
        try await Postgres.run("log events") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                _ = try await connection.checkedQuery(
                    "SELECT pg_advisory_xact_lock(\(Self.appendLock))",
                    logger: self.logger
                )
                var told = try await Self.announcedStates(of: records, on: connection, logger: self.logger)
                var announced: [UUID: String] = [:]
                var logged: [EventRecord] = []
                var sessions: [String] = []
                var payloads: [String] = []
                for var record in records {
                    guard let session = record.session ?? (record.taskID == nil ? EventLogRules.everySession : nil)
                    else { continue }
                    if let announces = record.announcedState, let taskID = record.taskID {
                        // A final state already told is not told again (a repair racing a run's own event).
                        if EventLogRules.finalStates.contains(announces), told[taskID] == announces.rawValue {
                            continue
                        }
                        told[taskID] = announces.rawValue
                        announced[taskID] = announces.rawValue
                    }
                    record.eventID = nil
                    sessions.append(session)
                    payloads.append(record.jsonLine())
                    logged.append(record)
                }
                guard !logged.isEmpty else { return [] }
                // One statement: the states told, one insert whose rows are in the batch's
                // order (the ids, a sequence under the append lock, ascend in that order), and
                // the note to the other nodes (sent when the transaction commits).
                let changes = Array(announced)
                var ids: [Int64] = []
                for try await id in try await connection.checkedQuery(
                    """
                    WITH told AS (
                        UPDATE haul_task t SET "announcedState" = a.state
                        FROM unnest(\(changes.map(\.key))::uuid[], \(changes.map(\.value))::text[]) AS a(id, state)
                        WHERE t.id = a.id
                    ), logged AS (
                        INSERT INTO haul_event (session, payload)
                        SELECT e.session, e.payload FROM unnest(\(sessions)::text[], \(payloads)::text[])
                            WITH ORDINALITY AS e(session, payload, i) ORDER BY e.i
                        RETURNING id
                    ), signalled AS (
                        SELECT pg_notify(\(FleetSignals.channel), \(FleetSignal.events.payload))
                    )
                    SELECT logged.id FROM logged, signalled
                    """,
                    logger: self.logger
                ).decode(Int64.self) {
                    ids.append(id)
                }
                guard ids.count == logged.count else { throw HaulError(.store, "PostgreSQL did not log every event") }
                for (index, id) in ids.sorted().enumerated() { logged[index].eventID = id }
                return logged
            }
        }
    }

    /// The states last told of the tasks whose events announce one, their rows locked in
    /// one order (the heartbeat's and the fleet queue's), so that appends and lease renewals
    /// never deadlock. A removed task has none.
    private static func announcedStates(
        of records: [EventRecord],
        on connection: PostgresConnection,
        logger: Logger
    ) async throws -> [UUID: String] {
        let announcing = Array(Set(records.compactMap { $0.announcedState == nil ? nil : $0.taskID }))
        var told: [UUID: String] = [:]
        guard !announcing.isEmpty else { return told }
        for try await (id, state) in try await connection.checkedQuery(
            """
            SELECT id, "announcedState" FROM haul_task WHERE id = ANY(\(announcing)::uuid[]) ORDER BY id FOR UPDATE
            """,
            logger: logger
        ).decode((UUID, String?).self) {
            if let state { told[id] = state }
        }
        return told
    }

    package func loggedEvents(session: String?, after: Int64, limit: Int) async throws -> [EventRecord] {
        let decoder = HaulJSON.decoder
        let limit = Int64(max(0, limit))
        return try await Postgres.run("read the event log") {
            var records: [EventRecord] = []
            for try await (id, payload) in try await client.query(
                """
                SELECT id, payload FROM haul_event
                WHERE id > \(after) AND (\(session)::text IS NULL OR session IN (\(session)::text, \(EventLogRules.everySession)))
                ORDER BY id LIMIT \(limit)
                """,
                logger: logger
            ).decode((Int64, String).self) {
                guard var record = try? decoder.decode(EventRecord.self, from: Data(payload.utf8)) else { continue }
                record.eventID = id
                records.append(record)
            }
            return records
        }
    }

    package func lastEventID() async throws -> Int64 {
        try await Postgres.run("read the event log") {
            try await Self.lastEventID(client, logger: logger)
        }
    }

    /// The highest id the sequence ever gave (0 before the first).
    static func lastEventID(_ db: some PostgresQueryable, logger: Logger) async throws -> Int64 {
        for try await (value, called) in try await db.rows(
            "SELECT last_value, is_called FROM haul_event_id_seq",
            logger: logger
        ).decode((Int64, Bool).self) {
            return called ? value : 0
        }
        return 0
    }

    package func acknowledgedEventID(session: String) async throws -> Int64 {
        try await Postgres.run("read the event log") {
            for try await acknowledged in try await client.query(
                "SELECT acknowledged FROM haul_session WHERE name = \(session)",
                logger: logger
            ).decode(Int64.self) {
                return acknowledged
            }
            return 0
        }
    }

    package func acknowledgeEvents(
        _ marks: [(session: String, through: Int64)],
        keepingAfter floor: @escaping @Sendable (String) -> Int64?
    ) async throws -> Int64 {
        try await Postgres.run("record acknowledgements") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                // Under the append lock: the last id given is then the last committed.
                _ = try await connection.checkedQuery(
                    "SELECT pg_advisory_xact_lock(\(Self.appendLock))",
                    logger: self.logger
                )
                let last = try await Self.lastEventID(connection, logger: self.logger)
                var highest: [String: Int64] = [:]
                for mark in marks where mark.through <= last {
                    highest[mark.session] = max(highest[mark.session] ?? mark.through, mark.through)
                }
                for (session, eventID) in highest.sorted(by: { $0.key < $1.key }) {
                    _ = try await connection.checkedQuery(
                        """
                        INSERT INTO haul_session (name, acknowledged) VALUES (\(session), \(eventID))
                        ON CONFLICT (name) DO UPDATE SET acknowledged = GREATEST(haul_session.acknowledged, excluded.acknowledged)
                        """,
                        logger: self.logger
                    )
                    _ = try await connection.checkedQuery(
                        "DELETE FROM haul_event WHERE session = \(session) AND id <= \(min(eventID, floor(session) ?? eventID))",
                        logger: self.logger
                    )
                }
                return last
            }
        }
    }

    package func dropAcknowledgedEvents(session: String, keepingAfter floor: Int64?) async throws {
        try await Postgres.run("trim the event log") {
            _ = try await client.query(
                """
                DELETE FROM haul_event WHERE session = \(session) AND id <= LEAST(
                    COALESCE((SELECT acknowledged FROM haul_session WHERE name = \(session)), 0),
                    COALESCE(\(floor)::bigint, 9223372036854775807))
                """,
                logger: logger
            )
        }
    }

    @discardableResult
    package func pruneEventLog(keepingPerSession limit: Int) async throws -> Int {
        try await Postgres.run("trim the event log") {
            var removed = 0
            for try await _ in try await client.query(
                // Each session's newest event beyond the limit, found on the (session, id)
                // index, not by ranking the whole log; worked out once per session before the
                // delete (MATERIALIZED). Inlined, the planner could join first and run the
                // offset scan again for every event it compared: with statistics older than
                // the log (a table that grew since it was analysed), 66 s for 12,000 events of
                // one session, against 0.1 s so.
                """
                WITH cut AS MATERIALIZED (
                    SELECT s.session, (
                        SELECT id FROM haul_event WHERE session = s.session
                        ORDER BY id DESC OFFSET \(Int64(max(0, limit))) LIMIT 1
                    ) AS newest_dropped
                    FROM (SELECT DISTINCT session FROM haul_event) AS s
                )
                DELETE FROM haul_event e USING cut
                WHERE e.session = cut.session AND e.id <= cut.newest_dropped
                RETURNING e.id
                """,
                logger: logger
            ) {
                removed += 1
            }
            return removed
        }
    }

    package func unannouncedTasks() async throws -> [UnannouncedTask] {
        try await Postgres.run("read the tasks") {
            var tasks: [UnannouncedTask] = []
            for try await (id, session, state, announced, directory, fileName, totalLength, errorMessage)
                in try await client.query(
                    """
                    SELECT id, session, state, "announcedState", directory, "fileName", "totalLength", "errorMessage"
                    FROM haul_task
                    WHERE background AND state IN ('paused', 'cancelled', 'completed', 'failed')
                        AND "announcedState" IS DISTINCT FROM state
                    ORDER BY "queueOrder"
                    """,
                    logger: logger
                ).decode((UUID, String, String, String?, String, String?, Int64?, String?).self)
            {
                tasks.append(
                    UnannouncedTask(
                        id: id,
                        session: session,
                        state: TaskState(rawValue: state) ?? .failed,
                        announced: announced.flatMap(TaskState.init(rawValue:)),
                        path: fileName.map { (directory as NSString).appendingPathComponent($0) },
                        totalLength: totalLength,
                        errorMessage: errorMessage
                    )
                )
            }
            return tasks
        }
    }

    package func sessions(ofTasks ids: [UUID]) async throws -> [UUID: String] {
        try await Postgres.run("read the tasks' sessions") {
            var sessions: [UUID: String] = [:]
            for try await (id, session) in try await client.query(
                "SELECT id, session FROM haul_task WHERE id = ANY(\(ids)::uuid[])",
                logger: logger
            ).decode((UUID, String).self) {
                sessions[id] = session
            }
            return sessions
        }
    }

    package func sessionSummaries() async throws -> [(name: String, tasks: Int, pendingEvents: Int)] {
        try await Postgres.run("read the sessions") {
            var summaries: [(name: String, tasks: Int, pendingEvents: Int)] = []
            for try await (name, tasks, events) in try await client.query(
                """
                SELECT name, SUM(tasks)::bigint, SUM(events)::bigint FROM (
                    SELECT session AS name, COUNT(*) AS tasks, 0 AS events FROM haul_task WHERE background GROUP BY session
                    UNION ALL
                    SELECT session, 0, COUNT(*) FROM haul_event WHERE session <> \(EventLogRules.everySession)
                    GROUP BY session
                ) AS counted GROUP BY name ORDER BY name
                """,
                logger: logger
            ).decode((String, Int64, Int64).self) {
                summaries.append((name, TaskTable.int(tasks), TaskTable.int(events)))
            }
            return summaries
        }
    }

    package func backgroundStateCounts() async throws -> [String: Int] {
        try await Postgres.run("read the tasks") {
            var counts: [String: Int] = [:]
            for try await (state, count) in try await client.query(
                "SELECT state, COUNT(*) FROM haul_task WHERE background GROUP BY state",
                logger: logger
            ).decode((String, Int64).self) {
                counts[state] = TaskTable.int(count)
            }
            return counts
        }
    }
}
