import DequeModule
import Foundation
import Synchronization

/// Something that happened to a download managed by a ``DownloadManager``.
public enum DownloadEvent: Sendable {
    /// A task was added (queued).
    case added(DownloadInfo)
    /// A task moved from one state to another, and why.
    case stateChanged(id: UUID, from: TaskState, to: TaskState, reason: StateChangeReason)
    /// Progress of a running task, at most about ten times a second per task.
    case progress(id: UUID, DownloadProgress)
    /// A task continued earlier work from `offset`.
    case resumed(id: UUID, offset: Int64, expectedTotal: Int64?)
    /// A task's verified file is in place.
    case completed(id: UUID, result: DownloadResult)
    /// A task failed; the error carries resume data when the download can continue.
    case failed(id: UUID, error: HaulError)
    /// The network changed: its default route, whether that is metered, or the policy. Only
    /// a manager that watches the network (``DownloadManager/Configuration/watchesNetwork``)
    /// sends it, to every consumer, including those of one task's events.
    case networkChanged(NetworkStatus)
    /// A hook (``Hooks``) ran when the task ended, and how it ended.
    case hookFinished(id: UUID, run: HookRun)

    /// The task the event is about; nil for ``networkChanged(_:)``, which is about all of them.
    public var taskID: UUID? {
        switch self {
        case .added(let info): return info.id
        case .stateChanged(let id, _, _, _), .progress(let id, _), .resumed(let id, _, _), .completed(let id, _),
            .failed(let id, _), .hookFinished(let id, _):
            return id
        case .networkChanged: return nil
        }
    }

    var isProgress: Bool {
        if case .progress = self { return true }
        return false
    }
}

/// A stream of ``DownloadEvent``s: every event, or those of one task.
///
/// A consumer that reads slowly, or never, does not slow any download: progress is
/// coalesced to the latest value per task while it waits, and other events are kept up to
/// a bound (the oldest are dropped past it, and ``droppedEvents`` says how many).
///
/// Several iterators of one sequence share its events, each event going to one of them
/// (the one that waited longest). For every event in each consumer, give each its own
/// sequence (``DownloadManager/events()``).
public struct DownloadEvents: AsyncSequence, Sendable {
    public typealias Element = DownloadEvent

    let subscription: EventSubscription

    public func makeAsyncIterator() -> Iterator { Iterator(subscription: subscription) }

    /// Events dropped because this consumer fell more than the bound behind.
    public var droppedEvents: Int { subscription.dropped }

    /// The next event and every other one already waiting (up to `limit`); nil at the end.
    package func nextBatch(limit: Int = 500) async -> [DownloadEvent]? {
        guard let first = await subscription.next() else { return nil }
        return [first] + subscription.takeAvailable(limit: limit - 1)
    }

    public struct Iterator: AsyncIteratorProtocol {
        let subscription: EventSubscription

        public mutating func next() async -> DownloadEvent? { await subscription.next() }
    }
}

/// One consumer's queue. Thread-safe; the hub delivers, the consumer takes.
final class EventSubscription: Sendable {
    private struct State {
        var queue = Deque<DownloadEvent>()
        /// The latest progress of each task not yet delivered, in the order first seen.
        var pendingProgress: [UUID: DownloadProgress] = [:]
        var progressOrder: [UUID] = []
        /// Consumers waiting for an event, oldest first, by the number each was given.
        var waiters = Deque<(id: Int, continuation: CheckedContinuation<DownloadEvent?, Never>)>()
        var lastWaiterID = 0
        var finished = false
        var dropped = 0

        mutating func take() -> DownloadEvent? {
            if let event = queue.popFirst() { return event }
            while !progressOrder.isEmpty {
                let id = progressOrder.removeFirst()
                if let progress = pendingProgress.removeValue(forKey: id) { return .progress(id: id, progress) }
            }
            return nil
        }

        /// Moves a task's pending progress into the queue, so it is not delivered after a later event.
        mutating func flushProgress(of id: UUID) {
            guard let progress = pendingProgress.removeValue(forKey: id) else { return }
            progressOrder.removeAll { $0 == id }
            queue.append(.progress(id: id, progress))
        }
    }

    /// Events kept for a consumer that does not read, besides one progress value per task.
    static let bound = 10_000

    private let state = Mutex(State())
    private let taskID: UUID?

    init(taskID: UUID?) {
        self.taskID = taskID
    }

    var dropped: Int { state.withLock { $0.dropped } }

    /// How many consumers wait for an event now.
    var waitingCount: Int { state.withLock { $0.waiters.count } }

    /// What waits to be read: queued events, and coalesced progress values.
    var pendingCount: (events: Int, progress: Int) {
        state.withLock { ($0.queue.count, $0.pendingProgress.count) }
    }

    func deliver(_ event: DownloadEvent) {
        if let taskID, let about = event.taskID, about != taskID { return }
        let handOff = state.withLock { state -> (CheckedContinuation<DownloadEvent?, Never>, DownloadEvent)? in
            guard !state.finished else { return nil }
            if case .progress(let id, let progress) = event {
                if state.pendingProgress.updateValue(progress, forKey: id) == nil { state.progressOrder.append(id) }
            } else {
                if let about = event.taskID { state.flushProgress(of: about) }
                state.queue.append(event)
                if state.queue.count > EventSubscription.bound {
                    state.queue.removeFirst()
                    state.dropped += 1
                }
            }
            guard !state.waiters.isEmpty, let next = state.take() else { return nil }
            return (state.waiters.removeFirst().continuation, next)
        }
        if let (waiter, next) = handOff { waiter.resume(returning: next) }
    }

    /// Events ready now, without waiting.
    func takeAvailable(limit: Int) -> [DownloadEvent] {
        state.withLock { state in
            var events: [DownloadEvent] = []
            while events.count < limit, let event = state.take() { events.append(event) }
            return events
        }
    }

    func finish() {
        let waiters = state.withLock { state in
            state.finished = true
            defer { state.waiters.removeAll() }
            return state.waiters.map(\.continuation)
        }
        for waiter in waiters { waiter.resume(returning: nil) }
    }

    /// The next event; nil once finished, or when the calling task is cancelled.
    func next() async -> DownloadEvent? {
        let id = state.withLock { state in
            state.lastWaiterID += 1
            return state.lastWaiterID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<DownloadEvent?, Never>) in
                let ready = state.withLock { state -> (DownloadEvent?, Bool) in
                    if let event = state.take() { return (event, true) }
                    if state.finished || Task.isCancelled { return (nil, true) }
                    state.waiters.append((id, continuation))
                    return (nil, false)
                }
                if ready.1 { continuation.resume(returning: ready.0) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<DownloadEvent?, Never>? in
                guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                return state.waiters.remove(at: index).continuation
            }
            waiter?.resume(returning: nil)
        }
    }
}

/// Hands every event to every live subscription. Subscriptions the consumer dropped are
/// forgotten on the next publish.
final class EventHub: Sendable {
    private final class WeakSubscription: Sendable {
        weak let subscription: EventSubscription?
        init(_ subscription: EventSubscription) { self.subscription = subscription }
    }

    private let subscriptions = Mutex<[WeakSubscription]>([])

    func subscribe(taskID: UUID? = nil) -> DownloadEvents {
        let subscription = EventSubscription(taskID: taskID)
        subscriptions.withLock { $0.append(WeakSubscription(subscription)) }
        return DownloadEvents(subscription: subscription)
    }

    func publish(_ event: DownloadEvent) {
        let live = subscriptions.withLock { list -> [EventSubscription] in
            list.removeAll { $0.subscription == nil }
            return list.compactMap(\.subscription)
        }
        for subscription in live { subscription.deliver(event) }
    }

    func finish() {
        let live = subscriptions.withLock { $0.compactMap(\.subscription) }
        for subscription in live { subscription.finish() }
    }
}
