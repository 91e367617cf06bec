import DequeModule
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

    /// A task in the line or running, as kept here: 32 bytes, its host by number.
    private struct Placed: Sendable {
        var id: UUID
        var queueOrder: Int64
        var priority: Int32
        var host: UInt32
    }

    private(set) var maxConcurrent: Int
    private(set) var perHostLimit: Int
    /// In the order they will start. A deque: the next to start leaves from the front and a
    /// new task (the newest, at its priority) usually joins at the back, each in O(1); a
    /// place in it is found by binary search. A line of a million stays cheap to keep.
    private var waiting: Deque<Placed> = []
    /// The waiting tasks (their places are in the line alone: a caller that knows a task's
    /// entry gives it to find the task there at once), and how many wait per host.
    private var waitingSet: Set<UUID> = []
    private var waitingPerHost: [UInt32: Int] = [:]
    /// In the order they started (at most the limit: a plain array).
    private var running: [Placed] = []
    private var hosts = HostNames()

    /// - Precondition: both limits are at least 1 (the manager validates them first).
    init(maxConcurrent: Int, perHostLimit: Int) {
        precondition(maxConcurrent >= 1 && perHostLimit >= 1)
        self.maxConcurrent = maxConcurrent
        self.perHostLimit = perHostLimit
    }

    /// Waiting tasks, next to start first.
    var waitingIDs: [UUID] { waiting.map(\.id) }
    /// How many wait (some of them may be running still, asked to make room).
    var waitingCount: Int { waiting.count }
    /// Running tasks, oldest start first.
    var runningIDs: [UUID] { running.map(\.id) }

    func isWaiting(_ id: UUID) -> Bool { waitingSet.contains(id) }
    func isRunning(_ id: UUID) -> Bool { running.contains { $0.id == id } }

    /// Adds a task to the waiting line at its place: after every task that runs before it.
    mutating func enqueue(_ entry: Entry) {
        enqueue(
            Placed(
                id: entry.id,
                queueOrder: entry.queueOrder,
                priority: Int32(clamping: entry.priority),
                host: hosts.number(entry.host)
            )
        )
    }

    private mutating func enqueue(_ placed: Placed) {
        remove(placed.id)
        waiting.insert(placed, at: partitionPoint { Scheduler.runsBefore(placed, $0) })
        waitingSet.insert(placed.id)
        waitingPerHost[placed.host, default: 0] += 1
    }

    /// Forgets a task, waiting or running (it finished, failed, was paused or cancelled).
    /// - Parameter hint: the task's entry as it was enqueued, if known: its place is then
    ///   found by binary search; without it (or when it changed since), by a look along the line.
    @discardableResult
    mutating func remove(_ id: UUID, hint: Entry? = nil) -> Bool {
        if let index = running.firstIndex(where: { $0.id == id }) {
            running.remove(at: index)
            return true
        }
        guard waitingSet.contains(id) else { return false }
        var index = waiting.endIndex
        if let hint, hint.id == id {
            // Its place: the first entry it does not run after; then past any of equal rank.
            let entry = Placed(id: id, queueOrder: hint.queueOrder, priority: Int32(clamping: hint.priority), host: 0)
            index = partitionPoint { !Scheduler.runsBefore($0, entry) }
            while index < waiting.endIndex, waiting[index].id != id, !Scheduler.runsBefore(entry, waiting[index]) {
                index += 1
            }
        }
        if index == waiting.endIndex || waiting[index].id != id {
            index = waiting.firstIndex { $0.id == id } ?? waiting.endIndex
        }
        if index < waiting.endIndex { removeWaiting(at: index) }
        return true
    }

    /// Moves as many waiting tasks to running as the limits allow, in order; returns them.
    mutating func admit() -> [UUID] {
        var started: [UUID] = []
        var perHost = Dictionary(running.map { ($0.host, 1) }, uniquingKeysWith: +)
        while running.count < maxConcurrent, hasHostWithRoom(perHost),
            let index = waiting.firstIndex(where: { perHost[$0.host, default: 0] < perHostLimit })
        {
            let entry = removeWaiting(at: index)
            running.append(entry)
            perHost[entry.host, default: 0] += 1
            started.append(entry.id)
        }
        return started
    }

    /// Whether a host with tasks waiting has room under the per-host limit, given the
    /// running per host: when none has, the line is not searched (a million tasks of one
    /// full host would be, at every look).
    private func hasHostWithRoom(_ perHost: [UInt32: Int]) -> Bool {
        let full = perHost.filter { $0.value >= perHostLimit && waitingPerHost[$0.key] != nil }
        return waitingPerHost.count > full.count
    }

    /// The first index of the line where `isAfter` holds, by binary search: it holds from
    /// there to the end (the line is in order).
    private func partitionPoint(where isAfter: (Placed) -> Bool) -> Int {
        var (low, high) = (waiting.startIndex, waiting.endIndex)
        while low < high {
            let middle = low + (high - low) / 2
            if isAfter(waiting[middle]) { high = middle } else { low = middle + 1 }
        }
        return low
    }

    @discardableResult
    private mutating func removeWaiting(at index: Int) -> Placed {
        let entry = waiting.remove(at: index)
        waitingSet.remove(entry.id)
        if let count = waitingPerHost[entry.host], count > 1 {
            waitingPerHost[entry.host] = count - 1
        } else {
            waitingPerHost[entry.host] = nil
        }
        return entry
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

    private func runningCount(host: UInt32) -> Int {
        running.reduce(0) { $0 + ($1.host == host ? 1 : 0) }
    }

    private static func runsBefore(_ a: Placed, _ b: Placed) -> Bool {
        if a.priority != b.priority { return a.priority > b.priority }
        return a.queueOrder < b.queueOrder
    }
}
