import Foundation
import Haul
import HaulWire

/// What the daemon keeps of its sessions: the per-session event logs, the clients'
/// acknowledgements, and the counts it reports. ``Store`` (SQLite, through GRDB) is the one
/// engine today; fleet mode adds a PostgreSQL one beside it (issue 17), so the daemon's
/// services — ``EventLog``, ``Acknowledgements``, ``DaemonCore`` — depend on this and not
/// on SQL.
package protocol EventLogStore: Sendable {
    /// Logs `records` in order, each given the next event id; returns them with their ids.
    func appendEvents(_ records: [EventRecord]) async throws -> [EventRecord]
    /// A session's (or, for nil, every session's) logged events after `after`, oldest first.
    func loggedEvents(session: String?, after: Int64, limit: Int) async throws -> [EventRecord]
    /// The last event id ever given (0 before the first).
    func lastEventID() async throws -> Int64
    /// The last event a session's clients acknowledged (0 when none).
    func acknowledgedEventID(session: String) async throws -> Int64
    /// Records several acknowledgements at once (see ``Store/acknowledgeEvents(_:keepingAfter:)``);
    /// returns the last event id ever given.
    func acknowledgeEvents(
        _ marks: [(session: String, through: Int64)],
        keepingAfter floor: @escaping @Sendable (String) -> Int64?
    ) async throws -> Int64
    /// Deletes a session's acknowledged events, keeping those after `floor`.
    func dropAcknowledgedEvents(session: String, keepingAfter floor: Int64?) async throws
    /// Keeps at most `limit` events per session; returns how many went.
    func pruneEventLog(keepingPerSession limit: Int) async throws -> Int
    /// Background tasks whose last state the log does not have yet (after a crash).
    func unannouncedTasks() async throws -> [Store.UnannouncedTask]
    /// The session of a task, if the task exists.
    func session(ofTask id: UUID) async throws -> String?
    /// Every session with tasks or unacknowledged events.
    func sessionSummaries() async throws -> [(name: String, tasks: Int, pendingEvents: Int)]
    /// Background tasks by state.
    func backgroundStateCounts() async throws -> [String: Int]
}

extension Store: EventLogStore {}
