import Foundation
import Synchronization

/// What a download with piece hashes knows about its pieces while it runs: which are
/// verified, which sources wrote each one, how many bad pieces each source served, and the
/// pieces complete on disk waiting to be checked — under one lock, shared by the
/// connections (which report what they wrote) and the checker (``SegmentWorker``'s
/// `checkPieces`), which hashes each piece from the part file and has a bad one fetched
/// again (docs/architecture.md, "Piece hashes").
final class PieceVerifier: Sendable {
    let hashes: PieceHashes
    let total: Int64

    private struct State {
        /// One bit per piece.
        var verified: [UInt8]
        /// Per piece, the sources (bit `i` for source `i`) whose bytes it holds.
        var writers: [UInt16]
        /// Pieces queued for checking, or being checked.
        var queued: Set<Int> = []
        var pending: [Int] = []
        var waiter: CheckedContinuation<Int?, Never>?
        var closed = false
        /// Bad pieces each source served.
        var bad: [Int: Int] = [:]
        var checkedThisRun = 0
        var refetched = 0
        var version = 0
        var saved = 0
    }

    private let state: Mutex<State>

    /// A source is dropped for the download after this many bad pieces.
    static let badPiecesToDrop = 2

    /// - Parameter verified: the store's bitmap of pieces verified earlier (ignored unless it
    ///   has one bit per piece).
    init(hashes: PieceHashes, total: Int64, verified: [UInt8]?) {
        self.hashes = hashes
        self.total = total
        let bytes = (hashes.count + 7) / 8
        let known = verified.flatMap { $0.count == bytes ? $0 : nil } ?? [UInt8](repeating: 0, count: bytes)
        state = Mutex(State(verified: known, writers: [UInt16](repeating: 0, count: hashes.count)))
    }

    var count: Int { hashes.count }

    func range(of piece: Int) -> Range<Int64> { hashes.range(of: piece, total: total) }

    func isVerified(_ piece: Int) -> Bool {
        state.withLock { $0.verified[piece >> 3] & (1 << (piece & 7)) != 0 }
    }

    var verifiedCount: Int {
        state.withLock { state in state.verified.reduce(0) { $0 + $1.nonzeroBitCount } }
    }

    /// Pieces hashed in this run, and pieces fetched again because they did not match.
    var tally: (checked: Int, refetched: Int) { state.withLock { ($0.checkedThisRun, $0.refetched) } }

    /// Forgets what is verified: only pieces whose every byte is still committed keep their
    /// mark (a store's bitmap from before a crash that restarted the file names none of them).
    func keepVerified(where isWritten: (Range<Int64>) -> Bool) {
        let ranges = (0..<count).map(range(of:))
        state.withLock { state in
            for piece in 0..<ranges.count where state.verified[piece >> 3] & (1 << (piece & 7)) != 0 {
                if !isWritten(ranges[piece]) {
                    state.verified[piece >> 3] &= ~(1 << (piece & 7))
                    state.version += 1
                }
            }
        }
    }

    /// The file starts over from byte 0: nothing is verified, nobody wrote anything.
    func reset() {
        state.withLock { state in
            state.verified = [UInt8](repeating: 0, count: state.verified.count)
            state.writers = [UInt16](repeating: 0, count: state.writers.count)
            state.version += 1
        }
    }

    // MARK: Reports from the connections

    /// `source` wrote `bytes` into the part file: the pieces they touch now hold its bytes,
    /// and those complete on disk (`isWritten`) are queued for checking.
    func wrote(_ bytes: Range<Int64>, by source: Int, isWritten: (Range<Int64>) -> Bool) {
        let touched = hashes.pieces(overlapping: bytes)
        guard !touched.isEmpty else { return }
        let complete = touched.filter { isWritten(range(of: $0)) }
        state.withLock { state in
            for piece in touched { state.writers[piece] |= 1 << UInt16(source & 15) }
            for piece in complete { Self.enqueue(piece, in: &state) }
        }
    }

    /// Queues every piece complete on disk that is not verified (at the start of a run, and
    /// before the file is placed).
    func enqueueUnverified(where isWritten: (Range<Int64>) -> Bool) {
        let ranges = (0..<count).map(range(of:))
        state.withLock { state in
            for piece in 0..<ranges.count
            where state.verified[piece >> 3] & (1 << (piece & 7)) == 0 && isWritten(ranges[piece]) {
                Self.enqueue(piece, in: &state)
            }
        }
    }

    private static func enqueue(_ piece: Int, in state: inout State) {
        guard state.verified[piece >> 3] & (1 << (piece & 7)) == 0, !state.closed,
            state.queued.insert(piece).inserted
        else { return }
        if let waiter = state.waiter {
            state.waiter = nil
            waiter.resume(returning: piece)
        } else {
            state.pending.append(piece)
        }
    }

    // MARK: The checker

    /// The next piece to check; nil once ``close()`` was called and none is left.
    /// Nil at once, too, when the calling task is cancelled (the connections failed or stopped).
    func next() async -> Int? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                state.withLock { state in
                    if !state.pending.isEmpty {
                        continuation.resume(returning: state.pending.removeFirst())
                    } else if state.closed || Task.isCancelled {
                        continuation.resume(returning: nil)
                    } else {
                        state.waiter = continuation
                    }
                }
            }
        } onCancel: {
            state.withLock { state in
                state.waiter?.resume(returning: nil)
                state.waiter = nil
            }
        }
    }

    /// No more pieces will be queued in this run: the checker ends once the queued ones are done.
    func close() {
        state.withLock { state in
            state.closed = true
            if let waiter = state.waiter {
                state.waiter = nil
                waiter.resume(returning: nil)
            }
        }
    }

    /// Opens the queue again for another run (the connections of a new attempt).
    func reopen() {
        state.withLock { state in
            state.closed = false
            state.pending.removeAll()
            state.queued.removeAll()
        }
    }

    /// Piece `piece` matched its hash.
    func verified(_ piece: Int) {
        state.withLock { state in
            state.verified[piece >> 3] |= 1 << (piece & 7)
            state.queued.remove(piece)
            state.checkedThisRun += 1
            state.version += 1
        }
    }

    /// Piece `piece` did not match: each source whose bytes it holds is charged one bad
    /// piece. Returns the sources that wrote it and those that reached ``badPiecesToDrop``.
    func bad(_ piece: Int) -> (writers: [Int], spent: [Int]) {
        state.withLock { state in
            state.checkedThisRun += 1
            let writers = (0..<16).filter { state.writers[piece] & (1 << UInt16($0)) != 0 }
            var spent: [Int] = []
            for source in writers {
                state.bad[source, default: 0] += 1
                if state.bad[source] == Self.badPiecesToDrop { spent.append(source) }
            }
            return (writers, spent)
        }
    }

    /// Piece `piece` was written again, by `source` alone.
    func rewritten(_ piece: Int, by source: Int) {
        state.withLock { state in
            state.writers[piece] = 1 << UInt16(source & 15)
            state.refetched += 1
        }
    }

    /// The bitmap of verified pieces, when it changed since the last call: what a
    /// checkpoint records.
    func changes() -> [UInt8]? {
        state.withLock { state in
            guard state.version != state.saved else { return nil }
            state.saved = state.version
            return state.verified
        }
    }
}
