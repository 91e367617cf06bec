import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// The switch that stops a transfer: the first request wakes it; a user's pause or cancel
/// replaces a scheduler's yield until the run concludes; after that, nothing changes the
/// reason the run ended by.
@Suite("Stopping a transfer", .timeLimit(.minutes(1)))
struct TransferControlTests {
    @Test("a pause asked after a yield, before the run concludes, is the reason it ends by; one after is too late")
    func userWordWins() async {
        let control = TransferControl()
        control.request(.yield)
        await control.waitForStop()
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
}
