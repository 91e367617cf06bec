import Foundation
import GRDB
import Haul
import HaulWire
import HaulWireMapping

/// The daemon's event log: per-session events with increasing ids, kept until a client
/// acknowledges them, and the task state each task's events last told.
extension Store {
    package typealias UnannouncedTask = HaulDaemon.UnannouncedTask

    /// Where events about no task are logged (``EventLogRules/everySession``).
    static let everySession = EventLogRules.everySession

    /// Appends events, in order, in one transaction; each must have its session, but for
    /// events about no task (logged for every session). An event that would tell a final
    /// state (paused, cancelled, completed, failed) its task's log already told is skipped,
    /// so a repair after a crash and a late event never both land.
    /// - Returns: the events as logged, with their ids.
    package func appendEvents(_ records: [EventRecord]) async throws -> [EventRecord] {
        try await write { db in
            var logged: [EventRecord] = []
            for var record in records {
                guard let session = record.session ?? (record.taskID == nil ? Store.everySession : nil) else {
                    continue
                }
                if let announces = record.announcedState, record.taskID != nil {
                    // Statements cached on the connection: an add of thousands logs as many
                    // events. What was told is read only for a final state (an add's is not).
                    if EventLogRules.finalStates.contains(announces),
                        try String.fetchOne(
                            db.cachedStatement(sql: "SELECT announcedState FROM task WHERE id = ?"),
                            arguments: [record.taskID]
                        ) == announces.rawValue
                    {
                        continue
                    }
                    try db.cachedStatement(sql: "UPDATE task SET announcedState = ? WHERE id = ?")
                        .execute(arguments: [announces.rawValue, record.taskID])
                }
                record.eventID = nil
                let payload = record.jsonLine()
                try db.cachedStatement(sql: "INSERT INTO event (session, payload, createdAt) VALUES (?, ?, ?)")
                    .execute(arguments: [session, payload, StoreDate.now])
                record.eventID = db.lastInsertedRowID
                logged.append(record)
            }
            return logged
        }
    }

    /// Logged events after `after`, oldest first: of one session (with those about no task),
    /// or of all with nil.
    package func loggedEvents(session: String?, after: Int64, limit: Int = 1_000) async throws -> [EventRecord] {
        let decoder = HaulJSON.decoder
        return try await read { db in
            var sql = "SELECT id, payload FROM event WHERE id > ?"
            var arguments: StatementArguments = [after]
            if let session {
                sql += " AND session IN (?, ?)"
                arguments += [session, Store.everySession]
            }
            sql += " ORDER BY id LIMIT ?"
            arguments += [limit]
            return try Row.fetchAll(db, sql: sql, arguments: arguments).compactMap { row in
                let payload: String = row[1]
                guard var record = try? decoder.decode(EventRecord.self, from: Data(payload.utf8)) else { return nil }
                record.eventID = row[0]
                return record
            }
        }
    }

    /// The id of the newest logged event (0 when none ever was).
    package func lastEventID() async throws -> Int64 {
        try await read { db in
            try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'event'") ?? 0
        }
    }

    /// The last event id a client of `session` acknowledged (0 when none).
    package func acknowledgedEventID(session: String) async throws -> Int64 {
        try await read { db in
            try Int64.fetchOne(db, sql: "SELECT acknowledged FROM session WHERE name = ?", arguments: [session]) ?? 0
        }
    }

    /// Records several acknowledgements in one transaction: for each session, the highest
    /// of its marks; an acknowledgement beyond the last event ever logged is left out.
    /// - Parameter floor: per session, the last event that may be deleted (nil: no limit).
    /// - Returns: the last event id ever given: the acknowledgements beyond it were left out.
    package func acknowledgeEvents(
        _ marks: [(session: String, through: Int64)],
        keepingAfter floor: @escaping @Sendable (String) -> Int64?
    ) async throws -> Int64 {
        try await write { db in
            // AUTOINCREMENT keeps the highest id ever given in sqlite_sequence.
            let last = try Int64.fetchOne(db, sql: "SELECT seq FROM sqlite_sequence WHERE name = 'event'") ?? 0
            var highest: [String: Int64] = [:]
            for mark in marks where mark.through <= last {
                highest[mark.session] = max(highest[mark.session] ?? mark.through, mark.through)
            }
            for (session, eventID) in highest {
                try db.execute(
                    sql: """
                        INSERT INTO session (name, acknowledged) VALUES (?, ?)
                        ON CONFLICT(name) DO UPDATE SET acknowledged = MAX(acknowledged, excluded.acknowledged)
                        """,
                    arguments: [session, eventID]
                )
                try db.execute(
                    sql: "DELETE FROM event WHERE session = ? AND id <= ?",
                    arguments: [session, min(eventID, floor(session) ?? eventID)]
                )
            }
            return last
        }
    }

    /// The answer to an acknowledgement of an event that was never logged.
    package static func acknowledgementBeyond(last: Int64, _ eventID: Int64) -> HaulError {
        EventLogRules.acknowledgementBeyond(last: last, eventID)
    }

    /// Deletes a session's acknowledged events, but none after `floor`.
    package func dropAcknowledgedEvents(session: String, keepingAfter floor: Int64?) async throws {
        try await write { db in
            let acknowledged =
                try Int64.fetchOne(db, sql: "SELECT acknowledged FROM session WHERE name = ?", arguments: [session])
                ?? 0
            try db.execute(
                sql: "DELETE FROM event WHERE session = ? AND id <= ?",
                arguments: [session, min(acknowledged, floor ?? acknowledged)]
            )
        }
    }

    /// Keeps at most `limit` events per session, deleting the oldest; returns how many went.
    @discardableResult
    package func pruneEventLog(keepingPerSession limit: Int) async throws -> Int {
        try await write { db in
            // Each session's newest event beyond the limit, found on the (session, id) index:
            // ranking the whole log instead sorted every event, 24 ms for 10,000 of them, in
            // the writer's turn, once every 1,000 events appended.
            var removed = 0
            for session in try String.fetchAll(db, sql: "SELECT DISTINCT session FROM event") {
                guard
                    let newestDropped = try Int64.fetchOne(
                        db,
                        sql: "SELECT id FROM event WHERE session = ? ORDER BY id DESC LIMIT 1 OFFSET ?",
                        arguments: [session, max(0, limit)]
                    )
                else { continue }
                try db.execute(
                    sql: "DELETE FROM event WHERE session = ? AND id <= ?",
                    arguments: [session, newestDropped]
                )
                removed += db.changesCount
            }
            return removed
        }
    }

    /// Background tasks in a final state their log has not told.
    package func unannouncedTasks() async throws -> [UnannouncedTask] {
        try await read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT id, session, state, announcedState, directory, fileName, totalLength, errorMessage
                    FROM task
                    WHERE background AND state IN ('paused', 'cancelled', 'completed', 'failed')
                        AND announcedState IS NOT state
                    ORDER BY queueOrder
                    """
            )
            return rows.map { row in
                let directory: String = row[4]
                let fileName: String? = row[5]
                let announced: String? = row[3]
                return UnannouncedTask(
                    id: row[0],
                    session: row[1],
                    state: TaskState(rawValue: row[2]) ?? .failed,
                    announced: announced.flatMap(TaskState.init(rawValue:)),
                    path: fileName.map { (directory as NSString).appendingPathComponent($0) },
                    totalLength: row[6],
                    errorMessage: row[7]
                )
            }
        }
    }

    /// The session of each of the tasks that exists.
    package func sessions(ofTasks ids: [UUID]) async throws -> [UUID: String] {
        try await read { db in
            let statement = try db.cachedStatement(sql: "SELECT session FROM task WHERE id = ?")
            var sessions: [UUID: String] = [:]
            for id in ids {
                sessions[id] = try String.fetchOne(statement, arguments: [id])
            }
            return sessions
        }
    }

    /// Each session with background tasks or logged events: its task count and unacknowledged events.
    package func sessionSummaries() async throws -> [(name: String, tasks: Int, pendingEvents: Int)] {
        try await read { db in
            let rows = try Row.fetchAll(
                db,
                sql: """
                    SELECT name, SUM(tasks), SUM(events) FROM (
                        SELECT session AS name, COUNT(*) AS tasks, 0 AS events FROM task WHERE background GROUP BY session
                        UNION ALL
                        SELECT session, 0, COUNT(*) FROM event WHERE session != ? GROUP BY session
                    ) GROUP BY name ORDER BY name
                    """,
                arguments: [Store.everySession]
            )
            return rows.map { (name: $0[0], tasks: $0[1], pendingEvents: $0[2]) }
        }
    }
}

extension Store {
    /// How many background tasks are in each state, by the state's name.
    package func backgroundStateCounts() async throws -> [String: Int] {
        try await read { db in
            // `background = 1`, not `background`: the comparison lets SQLite count from the
            // (background, state) index alone.
            let rows = try Row.fetchAll(
                db,
                sql: "SELECT state, COUNT(*) FROM task WHERE background = 1 GROUP BY state"
            )
            return Dictionary(uniqueKeysWithValues: rows.map { ($0[0] as String, $0[1] as Int) })
        }
    }
}
