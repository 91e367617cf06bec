import HaulTestSupport
import Synchronization
import Testing

@testable import Haul

/// The readiness signal connections wait on instead of polling (``ChangeSignal``).
@Suite("Change signal", .timeLimit(.minutes(1)))
struct ChangeSignalTests {
    @Test("a change after the generation read wakes every waiter; one before the wait is never missed")
    func wakes() async {
        let signal = ChangeSignal()
        let seen = signal.generation
        signal.changed()
        await signal.wait(after: seen)  // Returns at once: the change came before the wait.

        let now = signal.generation
        let woken = Counter()
        await withTaskGroup(of: Void.self) { group in
            for _ in 0..<3 {
                group.addTask {
                    await signal.wait(after: now)
                    woken.add()
                }
            }
            // Waiters not waiting yet when it rings see the generation moved and return at once.
            signal.changed()
            await group.waitForAll()
        }
        #expect(woken.value == 3)
        #expect(signal.generation == now + 1)
    }

    @Test("a cancelled waiter returns without a change")
    func cancelled() async {
        let signal = ChangeSignal()
        let seen = signal.generation
        let waiter = Task { await signal.wait(after: seen) }
        waiter.cancel()
        await waiter.value
        #expect(signal.generation == seen)
    }
}

private final class Counter: Sendable {
    private let count = Mutex(0)
    func add() { count.withLock { $0 += 1 } }
    var value: Int { count.withLock { $0 } }
}
