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
/// run ends by: what it recorded is what its manager reads. ``waitForStop()`` returns once
/// there is a request, so whoever runs the transfer can cancel it and let it conclude.
final class TransferControl: Sendable {
    private struct State {
        var reason: StopReason?
        var concluded = false
    }

    private let state = Mutex(State())
    private let signal: AsyncStream<Void>
    private let signalSink: AsyncStream<Void>.Continuation

    init() {
        (signal, signalSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func request(_ stop: StopReason) {
        let first = state.withLock { state -> Bool in
            guard !state.concluded else { return false }
            guard let asked = state.reason else {
                state.reason = stop
                return true
            }
            if asked == .yield { state.reason = stop }  // The user's word over the scheduler's.
            return false
        }
        if first {
            signalSink.yield()
            signalSink.finish()
        }
    }

    var requested: StopReason? { state.withLock { $0.reason } }

    /// The reason the run ends by, fixed from now on: a request that comes later is too late
    /// for this run.
    @discardableResult
    func conclude() -> StopReason? {
        state.withLock { state in
            state.concluded = true
            return state.reason
        }
    }

    /// Returns when a stop is requested, or when the calling task is cancelled.
    func waitForStop() async {
        for await _ in signal { return }
    }
}
