import Foundation
import Testing

@testable import Haul

/// The plan's bookkeeping on its own: splits, claims, steals and the invariants.
@Suite("Segment plan", .timeLimit(.minutes(10)))
struct SegmentPlanTests {
    func plan(_ size: Int64, minSplit: Int64 = 10) -> SegmentPlan {
        SegmentPlan([SegmentRecord(taskID: UUID(), ordinal: 0, start: 0, end: size, committed: 0)], minSplit: minSplit)
    }

    @Test("a split gives equal parts, the first to the owner; claims hand out the rest")
    func splitAndClaim() {
        let plan = plan(100)
        plan.own(0)
        #expect(plan.split(0, into: 4) == 3)
        let records = plan.records(taskID: UUID())
        #expect(records.map(\.start) == [0, 25, 50, 75])
        #expect(records.map(\.end) == [25, 50, 75, 100])
        #expect([plan.claim(), plan.claim(), plan.claim()] == [1, 2, 3])
        #expect(plan.owners == 4)
    }

    @Test("a split never makes pieces below the minimum")
    func splitRespectsMinimum() {
        let plan = plan(100, minSplit: 40)
        plan.own(0)
        #expect(plan.split(0, into: 8) == 1)
        #expect(plan.records(taskID: UUID()).map(\.end) == [50, 100])
    }

    @Test("an idle connection steals the back half of the largest remaining segment, past what was accepted")
    func stealing() {
        let plan = plan(100)
        plan.own(0)
        #expect(plan.accept(30, segmentStart: 0) == (30, false))
        let stolen = plan.claim()
        #expect(stolen == 1)
        // 70 left after byte 30: the thief takes the back 35.
        #expect(plan.records(taskID: UUID()).map(\.start) == [0, 65])
        #expect(plan.segment(0).end == 65)
        // The victim may accept only up to its new end.
        #expect(plan.accept(50, segmentStart: 0) == (35, true))
        #expect(plan.accept(1, segmentStart: 0) == (0, true))
    }

    @Test("nothing is stolen when the half would be below the minimum")
    func noTinySteals() {
        let plan = plan(100, minSplit: 30)
        plan.own(0)
        _ = plan.accept(50, segmentStart: 0)
        #expect(plan.claim() == nil)
    }

    @Test("a released segment continues from what was written, not what was accepted")
    func releaseRewindsToWritten() {
        let plan = plan(100)
        plan.own(0)
        _ = plan.accept(40, segmentStart: 0)
        plan.wrote(upTo: 20, segmentStart: 0)
        plan.free(segmentStart: 0)
        #expect(plan.claim() == 0)
        #expect(plan.segment(0).received == 20)
    }

    @Test("checkpoints commit what was written when the snapshot was taken")
    func commitSnapshot() {
        let plan = plan(100)
        plan.own(0)
        _ = plan.accept(60, segmentStart: 0)
        plan.wrote(upTo: 40, segmentStart: 0)
        let snapshot = plan.snapshotWritten(taskID: UUID())
        plan.wrote(upTo: 60, segmentStart: 0)
        plan.committed(snapshot)
        #expect(plan.records(taskID: UUID()).first?.committed == 40)
        #expect(plan.bytesWritten == 60)
    }

    @Test("spreading a resume halves the largest unfinished segments, one per connection")
    func spread() {
        let plan = SegmentPlan(
            [
                SegmentRecord(taskID: UUID(), ordinal: 0, start: 0, end: 50, committed: 50),
                SegmentRecord(taskID: UUID(), ordinal: 1, start: 50, end: 100, committed: 60),
            ],
            minSplit: 5
        )
        plan.spread(over: 4)
        #expect(plan.unfinished == 4)
        let records = plan.records(taskID: UUID())
        #expect(records.first?.committed == 50)
        for (a, b) in zip(records, records.dropFirst()) { #expect(a.end == b.start) }
    }

    @Test("what is left to write: to each segment's end, from what is written; unbounded with an end unknown")
    func bytesUnwritten() {
        let plan = plan(100)
        #expect(plan.bytesUnwritten == 100)
        plan.own(0)
        #expect(plan.split(0, into: 2) == 1)
        #expect(plan.accept(30, segmentStart: 0) == (30, false))
        plan.wrote(upTo: 30, segmentStart: 0)
        #expect(plan.bytesUnwritten == 70)
        let resumed = SegmentPlan(
            [SegmentRecord(taskID: UUID(), ordinal: 0, start: 0, end: 1 << 20, committed: (1 << 20) - 10)],
            minSplit: 10
        )
        #expect(resumed.bytesUnwritten == 10)
        let open = SegmentPlan(
            [SegmentRecord(taskID: UUID(), ordinal: 0, start: 0, end: nil, committed: 5)],
            minSplit: 10
        )
        #expect(open.bytesUnwritten == .max)
    }
}
