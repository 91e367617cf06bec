import Foundation

/// Decides which tasks run, by the scheduling rules of docs/architecture.md. A plain value: the manager
/// tells it what happened and starts or stops what it says.
///
/// - Waiting tasks start oldest-first by the order they were queued; a higher priority
///   moves a task ahead of older ones.
/// - At most `maxConcurrent` run at once, and at most `perHostLimit` per host; a task
///   whose host is full waits without holding back tasks for other hosts.
/// - Lowering a limit sends the most recently started tasks back to waiting, keeping their
///   place in the queue (5 running, limit 2: the 3 newest wait, and the oldest of them is
///   the next to start). Raising it lets the oldest waiting start.
struct Scheduler: Sendable {
    /// A task as the scheduler sees it.
    struct Entry: Sendable, Equatable {
        var id: UUID
        /// Host (and port) of the URL, for the per-host limit.
        var host: String
        /// Higher runs sooner; ties go to the older task.
        var priority: Int
        /// When the task was queued, as a number that only grows (kept in the store).
        var queueOrder: Int64
        /// Whether the task may use a metered network (the manager's policy permitting).
        var allowsMetered = true
    }

    private(set) var maxConcurrent: Int
    private(set) var perHostLimit: Int
    /// In the order they will start.
    private var waiting: [Entry] = []
    /// In the order they started.
    private var running: [Entry] = []

    /// - Precondition: both limits are at least 1 (the manager validates them first).
    init(maxConcurrent: Int, perHostLimit: Int) {
        precondition(maxConcurrent >= 1 && perHostLimit >= 1)
        self.maxConcurrent = maxConcurrent
        self.perHostLimit = perHostLimit
    }

    /// Waiting tasks, next to start first.
    var waitingIDs: [UUID] { waiting.map(\.id) }
    /// Running tasks, oldest start first.
    var runningIDs: [UUID] { running.map(\.id) }

    func isWaiting(_ id: UUID) -> Bool { waiting.contains { $0.id == id } }
    func isRunning(_ id: UUID) -> Bool { running.contains { $0.id == id } }

    /// Adds a task to the waiting line at its place.
    mutating func enqueue(_ entry: Entry) {
        remove(entry.id)
        let index = waiting.firstIndex { Scheduler.runsBefore(entry, $0) } ?? waiting.endIndex
        waiting.insert(entry, at: index)
    }

    /// Forgets a task, waiting or running (it finished, failed, was paused or cancelled).
    @discardableResult
    mutating func remove(_ id: UUID) -> Bool {
        if let index = running.firstIndex(where: { $0.id == id }) {
            running.remove(at: index)
            return true
        }
        if let index = waiting.firstIndex(where: { $0.id == id }) {
            waiting.remove(at: index)
            return true
        }
        return false
    }

    /// Moves as many waiting tasks to running as the limits allow, in order; returns them.
    mutating func admit() -> [UUID] {
        var started: [UUID] = []
        while running.count < maxConcurrent,
            let index = waiting.firstIndex(where: { runningCount(host: $0.host) < perHostLimit })
        {
            let entry = waiting.remove(at: index)
            running.append(entry)
            started.append(entry.id)
        }
        return started
    }

    /// Changes the overall limit. Returns the running tasks that must go back to waiting,
    /// most recently started first; call ``admit()`` afterwards to fill a raised limit.
    mutating func setMaxConcurrent(_ limit: Int) -> [UUID] {
        precondition(limit >= 1)
        maxConcurrent = limit
        var yielded: [UUID] = []
        while running.count > limit {
            let entry = running.removeLast()
            enqueue(entry)
            yielded.append(entry.id)
        }
        return yielded
    }

    /// Changes the per-host limit; like ``setMaxConcurrent(_:)`` for each host over it.
    mutating func setPerHostLimit(_ limit: Int) -> [UUID] {
        precondition(limit >= 1)
        perHostLimit = limit
        var yielded: [UUID] = []
        while let index = running.lastIndex(where: { runningCount(host: $0.host) > limit }) {
            let entry = running.remove(at: index)
            enqueue(entry)
            yielded.append(entry.id)
        }
        return yielded
    }

    private func runningCount(host: String) -> Int {
        running.reduce(0) { $0 + ($1.host == host ? 1 : 0) }
    }

    private static func runsBefore(_ a: Entry, _ b: Entry) -> Bool {
        if a.priority != b.priority { return a.priority > b.priority }
        return a.queueOrder < b.queueOrder
    }
}
