import Foundation

/// Makes a download's checkpoints while its connections keep receiving.
///
/// A checkpoint takes what every segment has written, `fdatasync`s the part file (on NIO's
/// blocking-I/O thread pool), then records the segments with those offsets in the store in
/// one transaction — in that order, so the store never claims bytes that are not on disk.
/// ``run()`` makes one every `interval`, or sooner once `bytes` were written, while data
/// flows; the transfer makes a last one when its connections stop.
struct Checkpointer: Sendable {
    let part: PartFile
    let store: Store
    let taskID: UUID
    let plan: SegmentPlan
    let interval: Duration
    let bytes: Int64
    /// The download's sources, when it has mirrors: recorded with the segments when they changed.
    var sources: SourcePool?
    /// The download's pieces, when it has piece hashes: the verified ones recorded when they changed.
    var pieces: PieceVerifier?

    /// Checkpoints until the calling task is cancelled.
    func run() async throws {
        var last = ContinuousClock.now
        var lastWritten = plan.bytesCommitted
        let tick = min(interval, .milliseconds(250))
        while true {
            do {
                try await Task.sleep(for: tick)
            } catch {
                return  // Cancelled: the transfer makes the last checkpoint itself.
            }
            let written = plan.bytesWritten
            let now = ContinuousClock.now
            guard written > lastWritten, now - last >= interval || written - lastWritten >= bytes else { continue }
            last = now
            lastWritten = written
            try await checkpoint()
        }
    }

    /// Syncs (on ``FileIO``) and records what is written now. Not cancelled half-way, and
    /// made even by a stopping transfer: a sync whose offsets never reach the store is wasted.
    func checkpoint() async throws {
        // Taken before the segments: a piece verified by now was written before them, so
        // its bytes are among those this sync makes durable and this record commits.
        let verified = pieces?.changes()
        let snapshot = plan.snapshotWritten(taskID: taskID)
        let changedSources = sources?.changes()
        let (part, store, id) = (part, store, taskID)
        try await uncancellable {
            try await FileIO.run { try part.sync() }
            try await store.checkpoint(id, segments: snapshot, sources: changedSources, verifiedPieces: verified)
        }
        plan.committed(snapshot)
    }
}
