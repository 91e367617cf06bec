import Foundation
import HaulTestSupport
import Synchronization
import Testing

@testable import Haul

/// The switch that stops a transfer: the first request wakes it; a user's pause or cancel
/// replaces a scheduler's yield until the run concludes; after that, nothing changes the
/// reason the run ended by.
@Suite("Stopping a transfer", .timeLimit(.minutes(1)))
struct TransferControlTests {
    @Test("a pause asked after a yield, before the run concludes, is the reason it ends by; one after is too late")
    func userWordWins() {
        let control = TransferControl()
        control.request(.yield)
        control.request(.pause)
        #expect(control.requested == .pause)
        #expect(control.conclude() == .pause)
        control.request(.cancel)
        #expect(control.requested == .pause)
    }

    @Test("a yield after a pause or cancel changes nothing; a concluded run with no stop stays without one")
    func yieldNeverReplaces() {
        let paused = TransferControl()
        paused.request(.pause)
        paused.request(.yield)
        #expect(paused.requested == .pause)
        let cancelled = TransferControl()
        cancelled.request(.cancel)
        cancelled.request(.pause)
        #expect(cancelled.requested == .cancel)
        let completed = TransferControl()
        #expect(completed.conclude() == nil)
        completed.request(.pause)
        #expect(completed.requested == nil)
    }

    @Test(
        "the run's stop action is called once, at the first request; at once when one came before; never after the run concluded"
    )
    func stopActionOnce() {
        let calls = Mutex(0)
        let control = TransferControl()
        control.whenStopped { calls.withLock { $0 += 1 } }
        #expect(calls.withLock { $0 } == 0)
        control.request(.yield)
        control.request(.pause)
        #expect(calls.withLock { $0 } == 1)
        let late = TransferControl()
        late.request(.cancel)
        late.whenStopped { calls.withLock { $0 += 10 } }
        #expect(calls.withLock { $0 } == 11)
        let concluded = TransferControl()
        concluded.whenStopped { calls.withLock { $0 += 100 } }
        #expect(concluded.conclude() == nil)
        concluded.request(.pause)
        concluded.whenStopped { calls.withLock { $0 += 1000 } }
        #expect(calls.withLock { $0 } == 11)
    }
}
