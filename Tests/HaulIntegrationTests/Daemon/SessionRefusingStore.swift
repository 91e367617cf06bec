import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Logging
import Synchronization
import Testing

@testable import Haul
@testable import HaulDaemon

/// A session event log whose first `sessions(ofTasks:)` fails (`refusals` of them), as a
/// database under load may; it keeps what it was asked.
final class SessionRefusingStore: EventLogStore {
    let base: any EventLogStore
    private let refusals: Mutex<Int>
    let asked = Mutex<[Set<UUID>]>([])

    init(_ base: any EventLogStore, refusals: Int = 1) {
        self.base = base
        self.refusals = Mutex(refusals)
    }

    func sessions(ofTasks ids: [UUID]) async throws -> [UUID: String] {
        asked.withLock { $0.append(Set(ids)) }
        let refuse = refusals.withLock { left -> Bool in
            defer { left = max(0, left - 1) }
            return left > 0
        }
        if refuse { throw HaulError(.store, "Cannot read the tasks in the store: it did not answer") }
        return try await base.sessions(ofTasks: ids)
    }

    func appendEvents(_ records: [EventRecord]) async throws -> [EventRecord] { try await base.appendEvents(records) }
    func loggedEvents(session: String?, after: Int64, limit: Int) async throws -> [EventRecord] {
        try await base.loggedEvents(session: session, after: after, limit: limit)
    }
    func lastEventID() async throws -> Int64 { try await base.lastEventID() }
    func acknowledgedEventID(session: String) async throws -> Int64 {
        try await base.acknowledgedEventID(session: session)
    }
    func acknowledgeEvents(
        _ marks: [(session: String, through: Int64)],
        keepingAfter floor: @escaping @Sendable (String) -> Int64?
    ) async throws -> Int64 {
        try await base.acknowledgeEvents(marks, keepingAfter: floor)
    }
    func dropAcknowledgedEvents(session: String, keepingAfter floor: Int64?) async throws {
        try await base.dropAcknowledgedEvents(session: session, keepingAfter: floor)
    }
    func pruneEventLog(keepingPerSession limit: Int) async throws -> Int {
        try await base.pruneEventLog(keepingPerSession: limit)
    }
    func unannouncedTasks() async throws -> [UnannouncedTask] { try await base.unannouncedTasks() }
    func sessionSummaries() async throws -> [(name: String, tasks: Int, pendingEvents: Int)] {
        try await base.sessionSummaries()
    }
    func backgroundStateCounts() async throws -> [String: Int] { try await base.backgroundStateCounts() }
}
