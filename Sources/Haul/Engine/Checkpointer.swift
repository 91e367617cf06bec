import Foundation
import NIOPosix
import Synchronization

/// Makes checkpoints in the background while the transfer keeps receiving.
///
/// A checkpoint is `fdatasync` of the part file (on NIO's blocking-I/O thread pool), then
/// the committed offset in the store, in that order: the store never claims bytes that are
/// not on disk. At most one is in flight; bytes written after it started are simply covered
/// by the next one.
final class Checkpointer: Sendable {
    private struct State {
        var committed: Int64
        var inFlight = false
        var lastStart: ContinuousClock.Instant = .now
        var lastOffset: Int64
    }

    private let part: PartFile
    private let store: Store
    private let taskID: UUID
    private let interval: Duration
    private let bytes: Int64
    private let state: Mutex<State>

    init(part: PartFile, store: Store, taskID: UUID, committed: Int64, interval: Duration, bytes: Int64) {
        self.part = part
        self.store = store
        self.taskID = taskID
        self.interval = interval
        self.bytes = bytes
        self.state = Mutex(State(committed: committed, lastOffset: committed))
    }

    /// The offset last recorded in the store.
    var committed: Int64 { state.withLock { $0.committed } }

    /// Claims the next checkpoint when one is due (a second or `bytes` since the last one
    /// started) and none is running; the caller must have written everything below `offset`.
    func claimIfDue(offset: Int64, now: ContinuousClock.Instant) -> Bool {
        state.withLock { state in
            guard !state.inFlight, offset > state.lastOffset,
                now - state.lastStart >= interval || offset - state.lastOffset >= bytes
            else { return false }
            state.inFlight = true
            state.lastStart = now
            state.lastOffset = offset
            return true
        }
    }

    /// Syncs and records `offset`. Call after a successful ``claimIfDue(offset:now:)``.
    func run(upTo offset: Int64) async throws {
        defer { state.withLock { $0.inFlight = false } }
        let part = self.part
        try await NIOThreadPool.singleton.runIfActive { try part.sync() }
        try await commit(offset)
    }

    /// Syncs and records `offset` now, on this task; used at the end and after errors,
    /// when no background checkpoint is running.
    func checkpointNow(upTo offset: Int64) async throws {
        guard offset > committed else { return }
        try part.sync()
        try await commit(offset)
    }

    private func commit(_ offset: Int64) async throws {
        let (store, id) = (store, taskID)
        try await uncancellable { try await store.checkpoint(id, committed: [(0, offset)]) }
        state.withLock { $0.committed = max($0.committed, offset) }
    }
}
