import Synchronization

/// A readiness signal for any number of waiters: ``wait(after:)`` returns once something
/// changed since the ``generation`` the waiter read before it looked, or when its task is
/// cancelled. No state travels with it: a woken waiter looks again at what it waits for.
/// Connections wait with it for a source to have room or bytes to be written, instead of
/// polling.
final class ChangeSignal: Sendable {
    private struct State {
        var generation: UInt64 = 0
        var nextWaiter = 0
        var waiters: [Int: CheckedContinuation<Void, Never>] = [:]
    }

    private let state = Mutex(State())

    /// Read before looking at what is waited for, then passed to ``wait(after:)``: a change
    /// in between is never missed.
    var generation: UInt64 { state.withLock { $0.generation } }

    /// Something changed: every waiter wakes.
    func changed() {
        let waiters = state.withLock { state in
            state.generation &+= 1
            let waiters = state.waiters
            state.waiters = [:]
            return waiters
        }
        for waiter in waiters.values { waiter.resume() }
    }

    /// Returns at the first change after `seen` (at once when there was one), or when the
    /// calling task is cancelled.
    func wait(after seen: UInt64) async {
        let id = state.withLock { state in
            defer { state.nextWaiter += 1 }
            return state.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLock { state -> Bool in
                    guard state.generation == seen, !Task.isCancelled else { return true }
                    state.waiters[id] = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}
