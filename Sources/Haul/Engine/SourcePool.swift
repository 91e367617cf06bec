import Foundation
import Synchronization

/// The sources of one download while its connections run: the URL asked for (index 0) and
/// its mirrors. Which may take another connection, each one's validators, failures and
/// bytes, which are dropped and why — under one lock, shared by the connections.
///
/// A mirror takes segments only once it is verified: its bytes at a place another source
/// already wrote were fetched and compared (``SegmentWorker`` does it). While a connection
/// verifies a mirror, no other one takes it.
final class SourcePool: Sendable {
    private struct State {
        var sources: [DownloadSource]
        var connections: [Int]
        var failures: [Int]
        var verifying: Set<Int> = []
        /// Bumped by every change the store should see; `saved` is the last one it saw.
        var version = 0
        var saved = 0
    }

    /// Connections one source may have at once.
    let perSourceCap: Int
    private let state: Mutex<State>
    /// Rings when a source may have room again, or its standing changed (verified, dropped,
    /// compared again): a connection waiting for a source looks again.
    let signal = ChangeSignal()

    init(_ sources: [DownloadSource], perSourceCap: Int) {
        var sources = sources
        // The lead defines the file; it needs no comparison.
        if let lead = sources.firstIndex(where: { $0.dropped == nil }) { sources[lead].verified = true }
        self.perSourceCap = max(1, perSourceCap)
        state = Mutex(
            State(
                sources: sources,
                connections: Array(repeating: 0, count: sources.count),
                failures: Array(repeating: 0, count: sources.count)
            )
        )
    }

    var count: Int { state.withLock { $0.sources.count } }
    /// The source that opens the download and whose validators are the file's: the first
    /// not dropped (the URL asked for, until it is dropped).
    var lead: Int? { state.withLock { $0.sources.firstIndex { $0.dropped == nil } } }

    /// Makes `index` the lead: it defines the file from now on (its validators are the
    /// task's own).
    func lead(_ index: Int) {
        state.withLock { state in
            state.sources[index].verified = true
            state.verifying.remove(index)
            state.version += 1
        }
    }
    /// Sources not dropped.
    var activeCount: Int { state.withLock { $0.sources.count { $0.dropped == nil } } }
    /// Sources not dropped whose bytes agree with the file's.
    var verifiedCount: Int { state.withLock { $0.sources.count { $0.dropped == nil && $0.verified } } }

    func source(_ index: Int) -> DownloadSource { state.withLock { $0.sources[index] } }
    func isActive(_ index: Int) -> Bool { state.withLock { $0.sources[index].dropped == nil } }
    var snapshot: [DownloadSource] { state.withLock { $0.sources } }

    /// The sources, when they changed since the last call: what a checkpoint records.
    func changes() -> [DownloadSource]? {
        state.withLock { state in
            guard state.version != state.saved else { return nil }
            state.saved = state.version
            return state.sources
        }
    }

    /// Whether a source being verified could take another connection once it is: a
    /// connection that found none free waits for that rather than ending.
    var awaitsVerification: Bool {
        state.withLock { state in
            state.verifying.contains { state.sources[$0].dropped == nil && state.connections[$0] < perSourceCap }
        }
    }

    /// A connection for a source: the verified one with the fewest recent failures and
    /// connections, else a mirror no connection is verifying (marked as being verified now).
    /// Nil when every active source is at its cap or being verified.
    func take() -> Int? {
        state.withLock { state in
            let candidates = state.sources.indices.filter {
                state.sources[$0].dropped == nil && state.connections[$0] < perSourceCap
                    && (state.sources[$0].verified || !state.verifying.contains($0))
            }
            guard
                let best = candidates.min(by: {
                    (state.failures[$0], state.connections[$0], $0) < (state.failures[$1], state.connections[$1], $1)
                })
            else { return nil }
            state.connections[best] += 1
            if !state.sources[best].verified { state.verifying.insert(best) }
            return best
        }
    }

    /// Takes a connection of `index` whatever its cap (the first response's own).
    func take(_ index: Int) {
        state.withLock { $0.connections[index] += 1 }
    }

    /// Gives a connection back.
    func putBack(_ index: Int) {
        defer { signal.changed() }
        state.withLock { state in
            state.connections[index] = max(0, state.connections[index] - 1)
            state.verifying.remove(index)
        }
    }

    /// A mirror's bytes agreed with the file's: it takes segments from now on, asked with
    /// `validators` in `If-Range`.
    func verified(_ index: Int, validators: Validators) {
        defer { signal.changed() }
        state.withLock { state in
            state.sources[index].verified = true
            state.sources[index].validators = validators
            state.verifying.remove(index)
            state.version += 1
        }
    }

    /// Drops `index` for this download. Returns false, dropping nothing, when it is the
    /// last source not dropped: the download then fails as a single source's would.
    @discardableResult
    func drop(_ index: Int, reason: String) -> Bool {
        defer { signal.changed() }
        return state.withLock { state in
            guard state.sources[index].dropped == nil else { return true }
            guard state.sources.indices.contains(where: { $0 != index && state.sources[$0].dropped == nil }) else {
                return false
            }
            state.sources[index].dropped = String(reason.prefix(DownloadSource.maxReasonLength))
            state.verifying.remove(index)
            state.version += 1
            return true
        }
    }

    /// Counts a failure of `index` with nothing delivered since the last; returns how many
    /// in a row.
    func failed(_ index: Int) -> Int {
        state.withLock { state in
            state.failures[index] += 1
            return state.failures[index]
        }
    }

    /// Bytes of `index` written into the file: its failures in a row end.
    func delivered(_ count: Int, by index: Int) {
        state.withLock { state in
            state.sources[index].bytes += Int64(count)
            state.failures[index] = 0
            state.version += 1
        }
    }

    /// Whether another source than `index` could take its work now or soon: one not
    /// dropped and verified, or a mirror that may still be.
    func hasAlternative(to index: Int) -> Bool {
        state.withLock { state in
            state.sources.indices.contains { $0 != index && state.sources[$0].dropped == nil }
        }
    }

    /// The download starts over from byte 0 (another version): mirrors are compared again,
    /// with validators learnt again.
    func forgetVerification() {
        defer { signal.changed() }
        state.withLock { state in
            let lead = state.sources.firstIndex { $0.dropped == nil }
            for index in state.sources.indices {
                // Their bytes are gone with the file's.
                state.sources[index].bytes = 0
                guard index != lead else { continue }
                state.sources[index].verified = false
                state.sources[index].validators = nil
            }
            state.version += 1
        }
    }

    /// What a vote the file's bytes lost did to the sources on their side.
    enum FileSideOutvoted: Equatable {
        /// These verified sources are dropped now: the file starts over from the others.
        case dropped([Int])
        /// Another connection's vote dropped them first: the file starts over all the same.
        case alreadyDropped
        /// Every source left is on the file's side (the outvoting ones were dropped
        /// meanwhile): nothing is dropped and the file stands.
        case kept
    }

    /// Drops every source not dropped that was verified (the side of the file's bytes, when
    /// the mirrors outvote it), keeping the others. Connections checking two mirrors at once
    /// may both find the file outvoted; the second learns it was done.
    func outvoteFile(reason: String) -> FileSideOutvoted {
        defer { signal.changed() }
        return state.withLock { state in
            let active = state.sources.indices.filter { state.sources[$0].dropped == nil }
            let verified = active.filter { state.sources[$0].verified }
            if verified.isEmpty { return .alreadyDropped }
            guard verified.count < active.count else { return .kept }
            for index in verified { state.sources[index].dropped = reason }
            state.version += 1
            return .dropped(verified)
        }
    }
}
