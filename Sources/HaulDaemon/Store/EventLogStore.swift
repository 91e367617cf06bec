import Foundation
import Haul
import HaulWire
import HaulWireMapping

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
    func unannouncedTasks() async throws -> [UnannouncedTask]
    /// The session of each of the tasks that exists.
    func sessions(ofTasks ids: [UUID]) async throws -> [UUID: String]
    /// Every session with tasks or unacknowledged events.
    func sessionSummaries() async throws -> [(name: String, tasks: Int, pendingEvents: Int)]
    /// Background tasks by state.
    func backgroundStateCounts() async throws -> [String: Int]
}

extension Store: EventLogStore {}

extension EventLogStore {
    /// Records that a client of `session` has every event up to `eventID`, and deletes them.
    /// An acknowledgement never moves backwards, and never beyond the last event written:
    /// one that did would hide every later event from the session.
    /// - Throws: ``HaulError/Code/invalidArgument`` for an id no event has had yet.
    /// - Parameter floor: the events after this id stay, however far the acknowledgement
    ///   goes: a stream attached to the session has yet to send them. They go with a later
    ///   acknowledgement, or ``dropAcknowledgedEvents(session:keepingAfter:)``.
    package func acknowledgeEvents(
        session: String,
        through eventID: Int64,
        keepingAfter floor: Int64? = nil
    ) async throws {
        let last = try await acknowledgeEvents([(session, eventID)], keepingAfter: { _ in floor })
        if eventID > last { throw EventLogRules.acknowledgementBeyond(last: last, eventID) }
    }

    package func loggedEvents(session: String?, after: Int64) async throws -> [EventRecord] {
        try await loggedEvents(session: session, after: after, limit: 1_000)
    }
}

/// What every engine's event log keeps alike.
package enum EventLogRules {
    /// Where events about no task (the network's) are logged: a name no session can have.
    /// Every session's reader reads them with its own.
    package static let everySession = ""

    /// The final states: an event telling one its task's log already told is not logged again.
    package static let finalStates: Set<API.TaskState> = [.paused, .cancelled, .completed, .failed]

    /// The answer to an acknowledgement of an event that was never logged.
    package static func acknowledgementBeyond(last: Int64, _ eventID: Int64) -> HaulError {
        HaulError(
            .invalidArgument,
            "Cannot acknowledge through event \(eventID): the last event is \(last)",
            hint: "Acknowledge an id you have received"
        )
    }
}

/// A background task whose state its session's log has not told yet (the daemon stopped
/// between the two).
package struct UnannouncedTask: Sendable, Equatable {
    package var id: UUID
    package var session: String
    package var state: TaskState
    package var announced: TaskState?
    package var path: String?
    package var totalLength: Int64?
    package var errorMessage: String?

    package init(
        id: UUID,
        session: String,
        state: TaskState,
        announced: TaskState?,
        path: String?,
        totalLength: Int64?,
        errorMessage: String?
    ) {
        self.id = id
        self.session = session
        self.state = state
        self.announced = announced
        self.path = path
        self.totalLength = totalLength
        self.errorMessage = errorMessage
    }
}

/// What another daemon of the fleet did that this one may act on at once
/// (``FleetView/fleetSignals()``). A hint, never the state: the store is read for that.
package enum FleetSignal: Sendable, Hashable {
    /// A node not running task `id` changed it (paused, cancelled, resumed, removed it):
    /// the node running it checks its lease now rather than at its next write.
    case task(UUID)
    /// Tasks wait in the queue (added, resumed, given back): nodes with room take leases now.
    case queue
    /// The fleet's limits or settings changed.
    case settings
    /// Events were logged to the sessions' logs.
    case events
    /// Node `node` was asked to drain (``FleetView/drainRequest()`` says how).
    case drain(node: String)
    /// Signals may have been missed (the listening connection broke and is back): look at
    /// everything again.
    case resumed
}

/// A daemon's view of the fleet it runs in (fleet mode's shared store), for `haul status`
/// and `haul set`.
package protocol FleetView: Sendable {
    /// This daemon's name in the fleet.
    var node: String { get }
    /// The shared store, without secrets.
    var storeDescription: String { get }
    var leaseDuration: Duration { get }
    /// Every daemon that ever joined, by name, with its leases, heartbeat and speed.
    func fleetNodes() async throws -> [API.Status.Fleet.Node]
    /// What other nodes signal (changed settings, logged events), until the store closes.
    func fleetSignals() -> AsyncStream<FleetSignal>
    /// The fleet's caps over all its nodes together.
    func fleetCaps() async throws -> API.FleetCaps
    /// The own limits saved for node `node` (its downloads, connections, rate limit).
    func nodeLimits(of node: String) async throws -> StoredLimits
    /// Saves `limits` through node `node` — its own limits (``StoredLimits/nodeNames``) under
    /// its name, the others for the fleet — and the caps set in `caps` (0: none), in one
    /// transaction; every node hears of it.
    func saveLimits(_ limits: StoredLimits, of node: String, caps: API.FleetCaps?) async throws
    /// Asks node `node` to drain: it takes no new lease, and hands back what it runs at a
    /// checkpoint (or, `finishing`, lets it finish), then leaves; it hears of it at once.
    /// - Throws: ``HaulError/Code/notFound`` for a node that is not in the fleet or not running.
    func requestDrain(of node: String, finishing: Bool) async throws
    /// The drain asked of this node: nil for none, else whether it lets its downloads finish.
    func drainRequest() async throws -> Bool?
    /// This node takes no new lease from now on (it drains).
    func stopTakingWork()
}
