import Foundation

/// Makes a download's checkpoints while its connections keep receiving.
///
/// A checkpoint takes what every segment has written, `fdatasync`s the part file (on NIO's
/// blocking-I/O thread pool), then records the segments with those offsets in the store in
/// one transaction — in that order, so the store never claims bytes that are not on disk.
/// ``run()`` makes one every `interval`, or sooner once `bytes` were written, while data
/// flows; the transfer makes a last one when its connections stop — for a file that is
/// complete, with the sync that completes it (``take()`` before it, ``record(_:)`` after).
struct Checkpointer: Sendable {
    let part: PartFile
    let store: any TaskStore
    let taskID: UUID
    let plan: SegmentPlan
    let interval: Duration
    let bytes: Int64
    /// The download's sources, when it has mirrors: recorded with the segments when they changed.
    var sources: SourcePool?
    /// The download's pieces, when it has piece hashes: the verified ones recorded when they changed.
    var pieces: PieceVerifier?
    /// The time it paces checkpoints by.
    var timeline = Timeline()

    /// A run with at most this many bytes left to write makes no checkpoints while it runs:
    /// if the process dies, the next run fetches them again. Its end (complete, paused, failed)
    /// is still recorded with a last checkpoint. A run this short would seldom reach the first
    /// checkpoint (after ``interval``) anyway, and the task that waits for it took 7 % of the
    /// CPU of a daemon finishing thousands of files of 1 KiB.
    static let unwatchedAtMost: Int64 = 64 << 10

    /// Whether a run over this plan checkpoints while it runs (``unwatchedAtMost``).
    var watchesRun: Bool { plan.bytesUnwritten > Self.unwatchedAtMost }

    /// Checkpoints until the calling task is cancelled.
    func run() async throws {
        var last = timeline.now
        var lastWritten = plan.bytesCommitted
        let tick = min(interval, .milliseconds(250))
        while true {
            do {
                try await timeline.sleep(for: tick)
            } catch {
                return  // Cancelled: the transfer makes the last checkpoint itself.
            }
            let written = plan.bytesWritten
            let now = timeline.now
            guard written > lastWritten, now - last >= interval || written - lastWritten >= bytes else { continue }
            last = now
            lastWritten = written
            try await checkpoint()
        }
    }

    /// Syncs (on ``FileIO``) and records what is written now. Not cancelled half-way, and
    /// made even by a stopping transfer: a sync whose offsets never reach the store is wasted.
    func checkpoint() async throws {
        let pending = take()
        let part = part
        let started = ContinuousClock.now
        try await uncancellable {
            try await FileIO.run { try part.sync() }
            try await commit(pending)
        }
        HaulMetrics.checkpoint(ContinuousClock.now - started)
    }

    /// What a checkpoint records, taken before the sync that makes it true.
    struct Pending: Sendable {
        fileprivate let verified: [UInt8]?
        fileprivate let snapshot: [SegmentRecord]
        fileprivate let changedSources: [DownloadSource]?

        /// What the store writes of it.
        var record: CheckpointRecord {
            CheckpointRecord(segments: snapshot, sources: changedSources, verifiedPieces: verified)
        }
    }

    /// Takes what is written now, for ``record(_:)`` once the part file is synced.
    func take() -> Pending {
        // Taken before the segments: a piece verified by now was written before them, so
        // its bytes are among those this sync makes durable and this record commits.
        let verified = pieces?.changes()
        return Pending(
            verified: verified,
            snapshot: plan.snapshotWritten(taskID: taskID),
            changedSources: sources?.changes()
        )
    }

    /// Records what ``take()`` took, once the caller has synced the part file since: the
    /// completing transfer's own sync serves as the last checkpoint's.
    /// - Parameter completing: the file is in place; the task is recorded completed (its
    ///   part file forgotten) in the same transaction.
    func record(_ pending: Pending, completing: Bool = false) async throws {
        try await uncancellable { try await commit(pending, completing: completing) }
    }

    /// Takes note that the store recorded `pending` with something else (a finished file's
    /// placement): the plan's committed offsets move up as after ``record(_:completing:)``.
    func recorded(_ pending: Pending) {
        plan.committed(pending.snapshot)
    }

    private func commit(_ pending: Pending, completing: Bool = false) async throws {
        try await store.checkpoint(
            taskID,
            segments: pending.snapshot,
            sources: pending.changedSources,
            verifiedPieces: pending.verified,
            completing: completing
        )
        plan.committed(pending.snapshot)
    }
}
