import Foundation
import HaulTesting
import HaulWire
import Testing

@testable import Haul
@testable import HaulDaemon

/// A live listener's queue: what piled up is taken in one go (one write for a follower), it
/// is bounded without losing what is logged, and it ends on finish and on cancellation.
@Suite(.timeLimit(.minutes(1))) struct LiveListenerTests {
    private func logged(_ id: Int64) -> LiveItem {
        var record = EventRecord(taskID: UUID(), kind: .added, session: "s")
        record.eventID = id
        return .logged([LiveEvent(record)], after: id - 1)
    }

    /// The log ids of the logged items, and "heartbeat" for each heartbeat.
    private func names(_ items: [LiveItem]?) -> [String]? {
        items?.map { item in
            switch item {
            case .logged(let events, _): events.map { "\($0.record.eventID ?? 0)" }.joined(separator: ",")
            case .progress: "progress"
            case .heartbeat: "heartbeat"
            case .elsewhere: "elsewhere"
            }
        }
    }

    @Test("everything delivered while the listener was away is taken at once, in order")
    func takesWhatPiledUp() async {
        let listener = LiveListener()
        for id in Int64(1)...5 { listener.deliver(logged(id)) }
        listener.deliver(.elsewhere)
        #expect(names(await listener.next()) == ["1", "2", "3", "4", "5", "elsewhere"])
        listener.deliver(logged(6))
        #expect(names(await listener.next()) == ["6"])
    }

    @Test("a listener waiting is woken by the next item, alone")
    func wokenByOne() async {
        let listener = LiveListener()
        async let taken = listener.next()
        // Delivered only once the listener waits: nothing else wakes it.
        while !listener.isWaiting { await Task.yield() }
        listener.deliver(logged(1))
        #expect(names(await taken) == ["1"])
    }

    @Test("past its bound the oldest go; the first kept still says where the log stood before it")
    func boundedOldestFirst() async {
        let listener = LiveListener(limit: 3)
        for id in Int64(1)...5 { listener.deliver(logged(id)) }
        let items = await listener.next()
        #expect(names(items) == ["3", "4", "5"])
        // The stream compares this with what it has seen (2 is missing) and reads the store.
        if case .logged(_, let after) = items?.first { #expect(after == 2) } else { Issue.record("not logged") }
    }

    @Test("a heartbeat already waiting is not queued twice")
    func heartbeatsCoalesce() async {
        let listener = LiveListener()
        listener.deliver(.heartbeat)
        listener.deliver(.heartbeat)
        listener.deliver(logged(1))
        listener.deliver(.heartbeat)
        #expect(names(await listener.next()) == ["heartbeat", "1", "heartbeat"])
    }

    @Test("finished: what waits is still taken, then nil, and later items are ignored")
    func finish() async {
        let listener = LiveListener()
        listener.deliver(logged(1))
        listener.finish()
        listener.deliver(logged(2))
        #expect(names(await listener.next()) == ["1"])
        #expect(await listener.next() == nil)
    }

    @Test("a waiting listener whose task is cancelled gets nil")
    func cancelled() async {
        let listener = LiveListener()
        let waiting = Task { await listener.next() }
        while !listener.isWaiting { await Task.yield() }
        waiting.cancel()
        #expect(await waiting.value == nil)
    }

    @Test(
        "paced: a take close behind the last waits out the pace and gets what came meanwhile; one after a quiet spell is at once"
    )
    func paced() async {
        let clock = TestClock()
        let listener = LiveListener(pace: .milliseconds(20), timeline: Timeline(clock))
        listener.deliver(logged(1))
        #expect(names(await listener.next()) == ["1"], "the first take waits for nothing")
        listener.deliver(logged(2))
        async let second = listener.next()
        await clock.waitForSleepers(1)
        listener.deliver(logged(3))
        clock.advance(by: .milliseconds(19))
        #expect(clock.sleepers == 1, "still pacing")
        clock.advance(by: .milliseconds(1))
        #expect(names(await second) == ["2", "3"])
        // A quiet spell longer than the pace: the next item is taken without a wait.
        clock.advance(by: .milliseconds(50))
        listener.deliver(logged(4))
        #expect(names(await listener.next()) == ["4"])
    }
}
