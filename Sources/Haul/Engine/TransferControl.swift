import Synchronization

/// Why a running transfer was asked to stop.
enum StopReason: Sendable, Equatable {
    /// The user paused it: it keeps its data and waits to be resumed.
    case pause
    /// The scheduler took its slot (a lower limit, or shutdown): it keeps its data and queues again.
    case yield
    /// The user cancelled it: its data goes.
    case cancel
}

/// The switch that stops a transfer. The first request stops it; until the run concludes,
/// a user's pause or cancel replaces a scheduler's yield asked before it (the transfer
/// records what the user asked, not that it made room). ``conclude()`` fixes the reason the
/// run ends by: what it recorded is what its manager reads. ``whenStopped(_:)`` is told of the
/// first request, so whoever runs the transfer can cancel it and let it conclude.
final class TransferControl: Sendable {
    private struct State {
        var reason: StopReason?
        var concluded = false
        /// Called at the first request (``whenStopped(_:)``).
        var onStop: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())

    init() {}

    func request(_ stop: StopReason) {
        let action = state.withLock { state -> (@Sendable () -> Void)? in
            guard !state.concluded else { return nil }
            guard let asked = state.reason else {
                state.reason = stop
                defer { state.onStop = nil }
                return state.onStop
            }
            if asked == .yield { state.reason = stop }  // The user's word over the scheduler's.
            return nil
        }
        action?()
    }

    /// Calls `action` once, at the first stop request (at once when one came already), unless
    /// the run concludes first. It replaces an action given before.
    func whenStopped(_ action: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            guard !state.concluded else { return false }
            guard state.reason == nil else { return true }
            state.onStop = action
            return false
        }
        if now { action() }
    }

    var requested: StopReason? { state.withLock { $0.reason } }

    /// The reason the run ends by, fixed from now on: a request that comes later is too late
    /// for this run.
    @discardableResult
    func conclude() -> StopReason? {
        state.withLock { state in
            state.concluded = true
            state.onStop = nil
            return state.reason
        }
    }
}
