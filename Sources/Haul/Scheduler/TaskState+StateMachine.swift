/// The legal moves between ``TaskState``s, as a plain value: no I/O, no clocks, tested on its own.
///
/// ```
///            start            complete
///   queued ─────────▶ running ─────────▶ completed
///     ▲  ▲   yield      │  │  fail
///     │  └──────────────┘  ├──────────▶ failed ──┐
///     │ ▲   retryDue       │ retryLater          │ resume
///     │ └──────────── retrying ◀┘                │
///     │ resume    pause                          │
///   paused ◀──────────── queued, running, retrying
///     └──────────────────────────────────────────┘
///   offline: running → waitingForNetwork; online: waitingForNetwork → queued; giveUp: → failed
///   resume: from paused, failed, retrying or waitingForNetwork (at once) → queued
///   pause: from queued, running, retrying or waitingForNetwork → paused
///   cancel: from queued, running, paused, failed, retrying or waitingForNetwork → cancelled (final)
/// ```
/// Every other move is an error, never a silent no-op: a caller that asks to start a
/// completed task or resume a cancelled one has a bug worth hearing about.
struct TaskStateMachine: Sendable, Equatable {
    /// What can happen to a task.
    enum Event: String, Sendable, CaseIterable {
        /// The scheduler gives it a slot.
        case start
        /// The user pauses it (keeping its data).
        case pause
        /// The scheduler takes its slot back (the limit was lowered); it waits again, keeping its data.
        case yield
        /// Its verified file is in place.
        case complete
        /// It failed.
        case fail
        /// The user resumes a paused or failed task: it waits for a slot again.
        case resume
        /// The user cancels it; its partial data goes.
        case cancel
        /// A manager opened a store whose task was running when the process died: it waits again.
        case recover
        /// Its run failed in a way that may pass, and the manager keeps trying: it waits
        /// for its next try.
        case retryLater
        /// The time of its next try has come: it waits for a slot again.
        case retryDue
        /// Its server has no usable route: it waits for the network, spending no retries.
        case offline
        /// A usable route is back: it waits for a slot again.
        case online
        /// It waited for the network longer than allowed: it fails.
        case giveUp
    }

    /// A move that is not allowed.
    struct IllegalTransition: Error, Equatable, CustomStringConvertible {
        var from: TaskState
        var event: Event

        var description: String { "cannot \(event.rawValue) a \(from.rawValue) task" }
    }

    private(set) var state: TaskState

    init(_ state: TaskState = .queued) {
        self.state = state
    }

    /// Applies `event`, or throws without changing anything when it is not allowed in this state.
    @discardableResult
    mutating func handle(_ event: Event) throws(IllegalTransition) -> TaskState {
        guard let next = TaskStateMachine.next(from: state, on: event) else {
            throw IllegalTransition(from: state, event: event)
        }
        state = next
        return next
    }

    /// The state `event` leads to from `state`, or nil when the move is illegal.
    static func next(from state: TaskState, on event: Event) -> TaskState? {
        switch (state, event) {
        case (.queued, .start): return .running
        case (.queued, .pause), (.running, .pause), (.retrying, .pause), (.waitingForNetwork, .pause): return .paused
        case (.running, .yield), (.running, .recover): return .queued
        case (.running, .complete): return .completed
        case (.running, .fail): return .failed
        case (.running, .retryLater): return .retrying
        case (.retrying, .retryDue): return .queued
        case (.running, .offline): return .waitingForNetwork
        case (.waitingForNetwork, .online): return .queued
        case (.waitingForNetwork, .giveUp): return .failed
        case (.paused, .resume), (.failed, .resume), (.retrying, .resume), (.waitingForNetwork, .resume): return .queued
        case (.queued, .cancel), (.running, .cancel), (.paused, .cancel), (.failed, .cancel), (.retrying, .cancel),
            (.waitingForNetwork, .cancel):
            return .cancelled
        default: return nil
        }
    }
}
