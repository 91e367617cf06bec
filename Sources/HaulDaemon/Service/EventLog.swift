import Foundation
import Haul
import HaulWire
import HaulWireMapping
import Logging
import Synchronization

/// An event as a live listener gets it: the record, and its Server-Sent Events text,
/// encoded once for every listener.
struct LiveEvent: Sendable {
    let record: EventRecord
    let text: String

    init(_ record: EventRecord) {
        self.record = record
        self.text = ServerSentEvents.format(record)
    }
}

/// What a live listener of the daemon hears.
enum LiveItem: Sendable {
    /// Events just logged, of every session, in id order; `after` is the id the log had
    /// reached before them. A listener that has seen everything through `after` takes them
    /// as they are; one that missed something (its buffer overflowed) reads the store.
    case logged([LiveEvent], after: Int64)
    /// Progress of a running task, never logged.
    case progress(LiveEvent)
    /// Nothing happened for a while; a listener writes a heartbeat, which is also how it
    /// learns that its client went away.
    case heartbeat
    /// Another daemon of the fleet logged events: a listener reads the store for those of
    /// its sessions.
    case elsewhere
}

/// Writes the manager's events into the per-session log in the store, and tells live
/// listeners about them.
///
/// Listeners read logged events back from the store rather than from memory: a listener
/// that falls behind loses nothing, since the log is the one source of what happened.
final class EventLog: Sendable {
    private let store: any EventLogStore
    private let logger: Logger
    /// Events kept per session for clients that never acknowledge them.
    private let limitPerSession: Int
    private let listeners = Mutex<[UUID: LiveListener]>([:])
    /// The id of the last event logged by this daemon (0 before the first), so each
    /// broadcast says where it continues from. Only ``append(_:)`` moves it, one at a time.
    private let lastLogged = Mutex<Int64>(0)
    /// The time a refused request waits by before it is tried again, and listeners pace by.
    private let timeline: Timeline
    /// The least time between two writes of a live listener (``LiveListener``).
    private let listenerPace: Duration

    /// A listener takes what piled up at most twenty times a second: events close behind
    /// others wait up to this long, so that a busy daemon writes a follower a batch at a time.
    static let listenerPace = Duration.milliseconds(50)

    init(
        store: any EventLogStore,
        limitPerSession: Int,
        logger: Logger,
        clock: any Clock<Duration> = ContinuousClock(),
        listenerPace: Duration = EventLog.listenerPace
    ) {
        self.store = store
        self.limitPerSession = limitPerSession
        self.logger = logger
        self.timeline = Timeline(clock)
        self.listenerPace = listenerPace
    }

    /// Records `events` until they end, then ends every listener.
    func run(_ events: DownloadEvents) async {
        defer { finishListeners() }
        var sessions: [UUID: String] = [:]
        var appendedSincePrune = 0
        var dropped = events.droppedEvents
        // Events the store refused to log: their tasks' final states are logged once it takes them.
        var needsRepair = false
        if let last = try? await store.lastEventID() { lastLogged.withLock { $0 = last } }
        await repair()
        while let batch = await events.nextBatch() {
            var records: [EventRecord] = []
            // The sessions of the batch's tasks not known here (run here, added elsewhere),
            // asked of the store at once; unanswered, their final states are logged once it answers.
            var lookedUp = Set(Self.unknownTasks(in: batch, known: sessions))
            if !lookedUp.isEmpty {
                if let found = await self.sessions(ofTasks: Array(lookedUp)) {
                    sessions.merge(found) { _, stored in stored }
                } else {
                    needsRepair = true
                }
            }
            for event in batch {
                guard let taskID = event.taskID else {
                    // About no task (the network): every session's listeners hear it.
                    records.append(EventRecord(event))
                    continue
                }
                if case .added(let info) = event { sessions[taskID] = info.session }
                if sessions[taskID] == nil, !lookedUp.contains(taskID) {
                    lookedUp.insert(taskID)
                    if let found = await self.sessions(ofTasks: [taskID]) {
                        sessions[taskID] = found[taskID]
                    } else {
                        needsRepair = true
                    }
                }
                // A task removed meanwhile has no session to tell.
                guard let session = sessions[taskID] else { continue }
                let record = EventRecord(event, session: session)
                if record.kind == .completed || record.kind == .failed || record.to == .cancelled {
                    // Its last event: a later one (after a re-add) looks the session up again.
                    sessions[taskID] = nil
                    lookedUp.remove(taskID)
                }
                if record.kind == .progress {
                    broadcast(.progress(LiveEvent(record)))
                } else {
                    records.append(record)
                }
            }
            if !records.isEmpty || needsRepair {
                if needsRepair { needsRepair = !(await repair()) }
                if !records.isEmpty, !(await append(records)) { needsRepair = true }
            }
            if events.droppedEvents != dropped {
                // The log fell more than the subscription's bound behind: tell what it missed.
                dropped = events.droppedEvents
                await repair()
            }
            appendedSincePrune += records.count
            if appendedSincePrune >= 1_000 {
                appendedSincePrune = 0
                await prune()
            }
        }
    }

    /// The tasks of `batch` whose session is not known here: those whose first event in it
    /// is not their add.
    private static func unknownTasks(in batch: [DownloadEvent], known: [UUID: String]) -> [UUID] {
        var seen: Set<UUID> = []
        var unknown: [UUID] = []
        for event in batch {
            guard let taskID = event.taskID, seen.insert(taskID).inserted else { continue }
            if case .added = event { continue }
            if known[taskID] == nil { unknown.append(taskID) }
        }
        return unknown
    }

    /// The sessions of tasks whose events are to be logged (a task removed has none), asked
    /// of the store a few times a second apart when it refuses (under load a database may,
    /// for a moment): an event skipped for want of its session would be lost to every
    /// follower. Nil when the store did not answer, after a few seconds of asking.
    private func sessions(ofTasks ids: [UUID]) async -> [UUID: String]? {
        await asked(
            "cannot read the sessions of tasks",
            givingUp:
                "cannot read the sessions of \(ids.count) tasks; their final states are logged once the store answers",
            { try await self.store.sessions(ofTasks: ids) }
        )
    }

    /// Asks the store, and again a second apart while it refuses, up to
    /// ``appendAttempts`` times; nil when it never answered (or the log is stopping).
    private func asked<T>(
        _ refusal: String,
        givingUp: String,
        _ request: () async throws -> T
    ) async -> T? {
        for attempt in 1...EventLog.appendAttempts {
            do {
                return try await request()
            } catch {
                guard attempt < EventLog.appendAttempts, !Task.isCancelled else {
                    logger.error("\(givingUp)", metadata: ["error": "\(error)"])
                    return nil
                }
                if attempt == 1 { logger.warning("\(refusal), trying again", metadata: ["error": "\(error)"]) }
                try? await timeline.sleep(for: .seconds(1))
            }
        }
        return nil
    }

    /// Listens from now on. The listener ends when the daemon stops, or when `cancel` is
    /// called.
    func listen() -> (LiveListener, cancel: @Sendable () -> Void) {
        let id = UUID()
        let listener = LiveListener(pace: listenerPace, timeline: timeline)
        listeners.withLock { $0[id] = listener }
        let cancel: @Sendable () -> Void = { [weak self] in
            self?.listeners.withLock { _ = $0.removeValue(forKey: id) }
            listener.finish()
        }
        return (listener, cancel)
    }

    /// Sends a heartbeat to every listener; the daemon calls it every second.
    func heartbeat() { broadcast(.heartbeat) }

    /// Another daemon of the fleet logged events (``LiveItem/elsewhere``).
    func loggedElsewhere() { broadcast(.elsewhere) }

    /// Logs the final states of tasks that changed while no event could be logged (the
    /// daemon was killed between the two), so every client still hears them once.
    /// - Returns: false when the store could not be read or written.
    @discardableResult
    func repair() async -> Bool {
        do {
            let tasks = try await store.unannouncedTasks()
            guard !tasks.isEmpty else { return true }
            let records = tasks.map { task -> EventRecord in
                var record: EventRecord
                switch task.state {
                case .completed:
                    record = EventRecord(taskID: task.id, kind: .completed, session: task.session)
                    record.path = task.path
                    record.bytes = task.totalLength
                case .failed:
                    record = EventRecord(taskID: task.id, kind: .failed, session: task.session)
                    record.error = task.errorMessage
                default:
                    record = EventRecord(taskID: task.id, kind: .state, session: task.session)
                    record.from = task.announced.map(API.TaskState.init)
                    record.to = API.TaskState(task.state)
                }
                return record
            }
            logger.info("logging \(records.count) final states not told before")
            return await append(records)
        } catch  where !Task.isCancelled {
            logger.error("cannot repair the event log", metadata: ["error": "\(error)"])
            return false
        } catch {
            return false  // Stopping.
        }
    }

    /// How many times a refused append is tried again, a second apart, before its events
    /// are left to ``repair()``.
    static let appendAttempts = 10

    /// Logs `records` and tells the listeners; a store that refuses them (a full disk, say)
    /// is given a few seconds. False when they could not be logged.
    private func append(_ records: [EventRecord]) async -> Bool {
        let logged = await asked(
            "cannot log events",
            givingUp: "cannot log events; the final states of their tasks are logged once the store takes them",
            { try await self.store.appendEvents(records) }
        )
        guard let logged else { return false }
        broadcast(logged: logged)
        return true
    }

    private func broadcast(logged: [EventRecord]) {
        guard let last = logged.last?.eventID else { return }
        // The log's previous end: ids are only given by this writer, one append at a time.
        let previous = lastLogged.withLock { known in
            defer { known = last }
            return known
        }
        // No one listens: nothing to format (one that comes later reads the log from the
        // store: the next events it hears are not after what it has seen).
        guard listeners.withLock({ !$0.isEmpty }) else { return }
        broadcast(.logged(logged.map(LiveEvent.init), after: previous))
    }

    private func prune() async {
        do {
            let removed = try await store.pruneEventLog(keepingPerSession: limitPerSession)
            if removed > 0 {
                logger.notice("dropped \(removed) unacknowledged events beyond \(limitPerSession) per session")
            }
        } catch {
            logger.error("cannot prune the event log", metadata: ["error": "\(error)"])
        }
    }

    private func broadcast(_ item: LiveItem) {
        let listening = listeners.withLock { Array($0.values) }
        for listener in listening { listener.deliver(item) }
    }

    private func finishListeners() {
        let listening = listeners.withLock { list in
            defer { list.removeAll() }
            return Array(list.values)
        }
        for listener in listening { listener.finish() }
    }
}
