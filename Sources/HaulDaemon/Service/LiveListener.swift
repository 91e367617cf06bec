import DequeModule
import Haul
import Synchronization

/// One live listener's queue of what the event log tells (``LiveItem``): the log delivers,
/// the listener takes every item waiting at once, and no sooner than `pace` after it last
/// took some. A stream sends what piled up in one write: fifty followers of a daemon busy
/// with ten thousand downloads are woken at most twenty times a second each, not once an
/// event. An item after a quiet spell is taken at once: pacing only delays events that
/// come close behind others.
///
/// Bounded: past `limit` items the oldest go. Nothing logged is lost by that — a
/// ``LiveItem/logged(_:after:)`` says where the log stood before it, and a listener that
/// sees it has missed some reads them from the store.
final class LiveListener: Sendable {
    private struct State {
        var items = Deque<LiveItem>()
        var waiter: CheckedContinuation<[LiveItem]?, Never>?
        var finished = false
        /// The waiter's task was cancelled: it is given nothing more.
        var cancelled = false
        /// When items were last taken, on the timeline.
        var lastTaken: Duration?
    }

    let limit: Int
    /// The least time between two takes.
    let pace: Duration
    private let timeline: Timeline
    private let state = Mutex(State())

    init(limit: Int = 1_000, pace: Duration = .zero, timeline: Timeline = Timeline(ContinuousClock())) {
        self.limit = max(1, limit)
        self.pace = pace
        self.timeline = timeline
    }

    /// Whether the listener waits for an item right now.
    var isWaiting: Bool { state.withLock { $0.waiter != nil } }

    /// Adds `item` for the listener, waking it if it waits; nothing once it finished.
    func deliver(_ item: LiveItem) {
        let waiter = state.withLock { state -> CheckedContinuation<[LiveItem]?, Never>? in
            guard !state.finished else { return nil }
            if let waiter = state.waiter {
                state.waiter = nil
                return waiter
            }
            // A heartbeat already waiting says all a second one would.
            if case .heartbeat = item, case .heartbeat = state.items.last { return nil }
            state.items.append(item)
            if state.items.count > limit { state.items.removeFirst(state.items.count - limit) }
            return nil
        }
        waiter?.resume(returning: [item])
    }

    /// Ends the listener: it takes what is waiting, then nil.
    func finish() {
        let waiter = state.withLock { state -> CheckedContinuation<[LiveItem]?, Never>? in
            state.finished = true
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(returning: nil)
    }

    /// Every item waiting, in the order delivered, waiting for one if there is none, and
    /// first until `pace` has passed since the last take; nil once the listener is finished
    /// and everything was taken, or its task is cancelled.
    func next() async -> [LiveItem]? {
        if pace > .zero, let last = state.withLock({ $0.lastTaken }), timeline.now < last + pace {
            // Cancelled meanwhile: the wait below answers nil at once.
            try? await timeline.sleep(until: last + pace)
        }
        let items = await waitForItems()
        if items != nil, pace > .zero {
            let now = timeline.now
            state.withLock { $0.lastTaken = now }
        }
        return items
    }

    private func waitForItems() async -> [LiveItem]? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<[LiveItem]?, Never>) in
                let answer = state.withLock { state -> [LiveItem]?? in
                    if state.cancelled { return .some(nil) }
                    if !state.items.isEmpty {
                        defer { state.items.removeAll(keepingCapacity: true) }
                        return .some(Array(state.items))
                    }
                    if state.finished { return .some(nil) }
                    state.waiter = continuation
                    return .none
                }
                if case let .some(items) = answer { continuation.resume(returning: items) }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<[LiveItem]?, Never>? in
                state.cancelled = true
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume(returning: nil)
        }
    }
}
