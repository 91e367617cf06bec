import Synchronization

/// Wakes one waiting loop early: ``wait(atMost:)`` returns at the first ``ring()`` since the
/// last wait ended, or after the given time on its clock. Rings while nobody waits are kept
/// (as one).
package final class Doorbell: Sendable {
    private struct State {
        var rung = false
        var waiter: CheckedContinuation<Void, Never>?
        var generation = 0
    }

    private let state = Mutex(State())
    private let clock: any Clock<Duration>

    /// A doorbell whose waits time out on `clock`.
    package init(clock: any Clock<Duration> = ContinuousClock()) {
        self.clock = clock
    }

    /// Wakes the waiter, or the next one to wait.
    package func ring() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard let waiter = state.waiter else {
                state.rung = true
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume()
    }

    /// Returns at the next ring (at once if one came since the last wait), after `timeout`,
    /// or when the task is cancelled. One waiter at a time.
    package func wait(atMost timeout: Duration) async {
        let generation = state.withLock { state -> Int? in
            if state.rung {
                state.rung = false
                return nil
            }
            state.generation += 1
            return state.generation
        }
        guard let generation else { return }
        let clock = clock
        let timer = Task {
            try? await clock.sleep(for: timeout)
            self.wake(generation)
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let now = state.withLock { state -> Bool in
                    guard state.generation == generation, !state.rung else {
                        state.rung = false
                        return true
                    }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            self.wake(generation)
        }
        timer.cancel()
    }

    /// Ends the wait numbered `generation`, if it is still waiting.
    private func wake(_ generation: Int) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            guard state.generation == generation, let waiter = state.waiter else {
                // Not waiting yet: make the wait return as soon as it starts.
                if state.generation == generation { state.generation += 1 }
                return nil
            }
            state.waiter = nil
            state.generation += 1
            return waiter
        }
        waiter?.resume()
    }
}
