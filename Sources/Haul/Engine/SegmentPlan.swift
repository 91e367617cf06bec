import Foundation
import Synchronization

/// How one download's byte ranges are shared out among its connections.
///
/// Every segment covers `start..<end` of the file. A connection owns at most one segment at
/// a time; it *accepts* bytes up to the segment's end (which may move down while it runs,
/// when another connection steals the back half), *writes* them, and a checkpoint later
/// *commits* what was written and synced. The invariants, held under one lock:
/// `start ≤ committed ≤ written ≤ received ≤ end`, and the segments never overlap.
///
/// Work stealing: a connection with nothing left to claim takes the back half of the owned
/// segment with the most bytes still to come, when that half is at least the minimum split;
/// the victim's end moves down to the split point, which is always past what it has accepted.
final class SegmentPlan: Sendable {
    struct Segment: Equatable {
        var start: Int64
        /// One past the last byte; nil while the file's length is unknown (a single stream).
        var end: Int64?
        var received: Int64
        var written: Int64
        var committed: Int64
        var owned = false

        var isFinished: Bool { end.map { written >= $0 } ?? false }
        /// Bytes not yet accepted by anyone.
        var remaining: Int64 { end.map { $0 - received } ?? .max }
    }

    private struct State {
        var segments: [Segment]
        var minSplit: Int64
        var owners = 0
    }

    private let state: Mutex<State>
    /// Rings when a segment first holds a window of written bytes to compare a mirror with
    /// (``TransferRules/overlapLength``), and when a connection lets its segment go.
    let signal = ChangeSignal()

    init(_ records: [SegmentRecord], minSplit: Int64) {
        let segments = records.sorted { $0.start < $1.start }.map {
            Segment(
                start: $0.start,
                end: $0.end,
                received: $0.committed,
                written: $0.committed,
                committed: $0.committed
            )
        }
        state = Mutex(State(segments: segments, minSplit: max(1, minSplit)))
    }

    /// The segments as the store records them, with what is committed.
    func records(taskID: UUID) -> [SegmentRecord] { layout(taskID: taskID, offset: \.committed) }

    /// The layout with what is written so far, for a checkpoint about to sync the file.
    func snapshotWritten(taskID: UUID) -> [SegmentRecord] { layout(taskID: taskID, offset: \.written) }

    private func layout(taskID: UUID, offset: KeyPath<Segment, Int64>) -> [SegmentRecord] {
        state.withLock { state in
            state.segments.enumerated().map { index, segment in
                SegmentRecord(
                    taskID: taskID,
                    ordinal: index,
                    start: segment.start,
                    end: segment.end,
                    committed: segment[keyPath: offset]
                )
            }
        }
    }

    /// Marks a snapshot as durable: each segment's committed offset moves up to it.
    func committed(_ snapshot: [SegmentRecord]) {
        state.withLock { state in
            for record in snapshot {
                // Segments are only ever added or shortened, never moved, so `start` finds it.
                guard let index = state.segments.firstIndex(where: { $0.start == record.start }) else { continue }
                state.segments[index].committed = max(state.segments[index].committed, record.committed)
            }
        }
    }

    /// Bytes on disk (written) in all segments.
    var bytesWritten: Int64 { state.withLock { $0.segments.reduce(0) { $0 + ($1.written - $1.start) } } }
    /// Bytes committed in all segments.
    var bytesCommitted: Int64 { state.withLock { $0.segments.reduce(0) { $0 + ($1.committed - $1.start) } } }
    /// Bytes still to write in all segments; `Int64.max` when a segment's end is unknown.
    var bytesUnwritten: Int64 {
        state.withLock { state in
            state.segments.reduce(0) { total, segment in
                guard let end = segment.end else { return .max }
                let (sum, overflow) = total.addingReportingOverflow(max(0, end - segment.written))
                return overflow ? .max : sum
            }
        }
    }
    /// Whether every segment is complete.
    var isComplete: Bool { state.withLock { $0.segments.allSatisfy(\.isFinished) } }
    var count: Int { state.withLock { $0.segments.count } }
    /// Connections holding a segment now.
    var owners: Int { state.withLock { $0.owners } }
    /// Segments not finished.
    var unfinished: Int { state.withLock { $0.segments.count { !$0.isFinished } } }

    func segment(_ index: Int) -> Segment { state.withLock { $0.segments[index] } }

    /// Takes segment `index` (the single stream's, or the first response's).
    func own(_ index: Int) {
        state.withLock { state in
            precondition(!state.segments[index].owned)
            state.segments[index].owned = true
            state.owners += 1
        }
    }

    /// Cuts the rest of segment `index` (from what it has received to its end) into `parts`
    /// segments of at least the minimum split; the first stays with its owner. Returns how
    /// many segments there are now to work on besides the owner's.
    @discardableResult
    func split(_ index: Int, into parts: Int) -> Int {
        state.withLock { state in
            let segment = state.segments[index]
            guard let end = segment.end else { return 0 }
            let remaining = end - segment.received
            let count = Int(max(1, min(Int64(parts), remaining / state.minSplit)))
            guard count > 1 else { return 0 }
            let size = remaining / Int64(count)
            var boundaries = (1..<count).map { segment.received + size * Int64($0) }
            boundaries.append(end)
            state.segments[index].end = boundaries[0]
            let added = (1..<count).map { part in
                Segment(
                    start: boundaries[part - 1],
                    end: boundaries[part],
                    received: boundaries[part - 1],
                    written: boundaries[part - 1],
                    committed: boundaries[part - 1]
                )
            }
            state.segments.insert(contentsOf: added, at: index + 1)
            return added.count
        }
    }

    /// Before resuming with `connections` connections: halves the largest unfinished
    /// segments until there is one per connection or none can be halved any more.
    func spread(over connections: Int) {
        state.withLock { state in
            while state.segments.count(where: { !$0.isFinished }) < connections {
                guard
                    let index = state.segments.indices.filter({ !state.segments[$0].isFinished })
                        .max(by: { state.segments[$0].remaining < state.segments[$1].remaining }),
                    let end = state.segments[index].end
                else { return }
                let half = state.segments[index].remaining / 2
                guard half >= state.minSplit else { return }
                let middle = end - half
                state.segments[index].end = middle
                state.segments.insert(
                    Segment(start: middle, end: end, received: middle, written: middle, committed: middle),
                    at: index + 1
                )
            }
        }
    }

    /// Gives a connection work: an unowned unfinished segment, else the back half of the
    /// owned one with the most left when that half is at least the minimum split.
    /// Returns the segment's index, or nil when there is nothing to do.
    func claim() -> Int? {
        state.withLock { state in
            if let index = state.segments.firstIndex(where: { !$0.owned && !$0.isFinished }) {
                // A segment left by a connection that failed continues from what it wrote.
                state.segments[index].received = state.segments[index].written
                state.segments[index].owned = true
                state.owners += 1
                return index
            }
            guard
                let victim = state.segments.indices
                    .filter({ state.segments[$0].owned && state.segments[$0].end != nil })
                    .max(by: { state.segments[$0].remaining < state.segments[$1].remaining })
            else { return nil }
            let segment = state.segments[victim]
            let half = segment.remaining / 2
            guard half >= state.minSplit, let end = segment.end else { return nil }
            let middle = end - half
            state.segments[victim].end = middle
            let stolen = Segment(
                start: middle,
                end: end,
                received: middle,
                written: middle,
                committed: middle,
                owned: true
            )
            state.segments.insert(stolen, at: victim + 1)
            state.owners += 1
            return victim + 1
        }
    }

    /// Whether every byte of `range` is written (segments cover the file one after the other).
    func isWritten(_ range: Range<Int64>) -> Bool {
        state.withLock { state in
            for segment in state.segments {
                let end = segment.end ?? .max
                guard segment.start < range.upperBound, end > range.lowerBound else { continue }
                if segment.written < min(end, range.upperBound) { return false }
            }
            return true
        }
    }

    /// The segment that starts at `start`, if there is one.
    func segment(at start: Int64) -> Segment? {
        index(startingAt: start).map(segment)
    }

    /// Finds the index of the segment that starts at `start` (indices move when segments are added).
    func index(startingAt start: Int64) -> Int? {
        state.withLock { $0.segments.firstIndex { $0.start == start } }
    }

    /// Accepts up to `count` bytes for the segment starting at `start`: returns how many fit
    /// before its end (which another connection may have moved down), and whether the
    /// segment has every byte up to that end now. One lock per received chunk.
    func accept(_ count: Int, segmentStart start: Int64) -> (allowed: Int, complete: Bool) {
        state.withLock { state in
            guard let index = state.segments.firstIndex(where: { $0.start == start }) else { return (0, true) }
            let segment = state.segments[index]
            let allowed = segment.end.map { Int(min(Int64(count), max(0, $0 - segment.received))) } ?? count
            state.segments[index].received += Int64(allowed)
            let complete = segment.end.map { segment.received + Int64(allowed) >= $0 } ?? false
            return (allowed, complete)
        }
    }

    /// Records that the segment's bytes below `offset` are written to the part file.
    func wrote(upTo offset: Int64, segmentStart start: Int64) {
        let window = Int64(TransferRules.overlapLength)
        let filled = state.withLock { state -> Bool in
            guard let index = state.segments.firstIndex(where: { $0.start == start }) else { return false }
            let before = state.segments[index].written
            state.segments[index].written = max(before, offset)
            return before - start < window && state.segments[index].written - start >= window
        }
        if filled { signal.changed() }
    }

    /// Lets go of a segment: what was accepted but not written is forgotten, so whoever
    /// claims it next continues from what is on disk.
    func free(segmentStart start: Int64) {
        defer { signal.changed() }
        state.withLock { state in
            guard let index = state.segments.firstIndex(where: { $0.start == start }) else { return }
            if state.segments[index].owned { state.owners -= 1 }
            state.segments[index].owned = false
            state.segments[index].received = state.segments[index].written
        }
    }

    /// Frees the segment unless its owner is the only connection left: a failing
    /// connection steps aside while others can finish its work. Returns whether it stepped aside.
    func stepAside(segmentStart start: Int64) -> Bool {
        defer { signal.changed() }
        return state.withLock { state in
            guard state.owners > 1, let index = state.segments.firstIndex(where: { $0.start == start }) else {
                return false
            }
            state.segments[index].owned = false
            state.segments[index].received = state.segments[index].written
            state.owners -= 1
            return true
        }
    }

    /// Once a stream of unknown length ends: its length is what was written.
    func close(segmentStart start: Int64) -> Int64 {
        defer { signal.changed() }
        return state.withLock { state in
            let index = state.segments.firstIndex { $0.start == start }!
            state.segments[index].end = state.segments[index].written
            return state.segments[index].written
        }
    }
}
