import Dispatch
import Foundation
import HaulClient
import HaulTestSupport
import HaulWire
import HaulWireMapping
import Synchronization
import Testing

@testable import Haul

/// Blocking file work (writes, syncs, digests, renames, opening the store) must not hold
/// Swift's cooperative threads: with two of them, two blocked writes would stall every task
/// of the process, the daemon's API included.
@Suite(.timeLimit(.minutes(10))) struct FileIOTests {
    private final class Flag: Sendable {
        let raised = Mutex(false)
    }

    @Test("blocked file work leaves the cooperative threads free: a task can still run and release it")
    func blockedFileWorkLeavesTheCooperativePool() async throws {
        let blockers = 8  // more than the cooperative pool has threads on any machine this runs on
        let gate = DispatchSemaphore(value: 0)
        let watchdogFired = Flag()
        // Were the work on the cooperative threads, nothing below could run; the watchdog
        // then opens the gate after 60 s so the test fails instead of hanging.
        let watchdog = Thread {
            if Thread.current.isCancelled { return }
            Thread.sleep(forTimeInterval: 60)
            if Thread.current.isCancelled { return }
            watchdogFired.raised.withLock { $0 = true }
            for _ in 0..<blockers { gate.signal() }
        }
        watchdog.start()
        let blocked = (0..<blockers).map { _ in Task { try await FileIO.run { gate.wait() } } }
        // This needs a cooperative thread; it releases the blocked work.
        await Task.detached {
            for _ in 0..<blockers { gate.signal() }
        }.value
        for task in blocked { try await task.value }
        watchdog.cancel()
        #expect(!watchdogFired.raised.withLock { $0 }, "the blocked work held the cooperative threads")
    }
}
