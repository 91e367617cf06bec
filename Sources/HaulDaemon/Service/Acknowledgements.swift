import Haul
import HaulWire
import HaulWireMapping
import Synchronization

/// Writes the acknowledgements of event followers to the store, many in one transaction.
///
/// Fifty followers of a busy session each acknowledge up to ten times a second; one store
/// transaction each would queue five hundred writes a second in front of the downloads'
/// own. Instead, while one transaction runs, the acknowledgements that arrive wait for the
/// next, which records them all (a group commit): each caller still returns only once its
/// acknowledgement is in the store, so what it reads next already reflects it.
final class Acknowledgements: Sendable {
    private struct Waiting {
        let session: String
        let through: Int64
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var waiting: [Waiting] = []
        /// A writer is running; what arrives now goes in its next transaction.
        var writing = false
        var transactions = 0
    }

    private let store: any EventLogStore
    /// Per session, the last event that may be deleted (attached streams still send the rest).
    private let floor: @Sendable (String) -> Int64?
    private let state = Mutex(State())

    /// How many transactions have recorded acknowledgements.
    var transactions: Int { state.withLock { $0.transactions } }

    init(store: any EventLogStore, floor: @escaping @Sendable (String) -> Int64?) {
        self.store = store
        self.floor = floor
    }

    /// Records that the session's clients have every event through `eventID`; returns once stored.
    /// - Throws: ``HaulError/Code/invalidArgument`` for an id beyond the last event logged;
    ///   the store's error when it refused the write.
    func acknowledge(session: String, through eventID: Int64) async throws {
        guard eventID >= 0 else {
            throw HaulError(.invalidArgument, "Cannot acknowledge through event \(eventID): event ids start at 1")
        }
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let startWriter = state.withLock { state -> Bool in
                state.waiting.append(Waiting(session: session, through: eventID, continuation: continuation))
                guard !state.writing else { return false }
                state.writing = true
                return true
            }
            if startWriter { Task { await self.writeUntilNoneWait() } }
        }
    }

    /// Writes what waits, batch after batch, until nothing does.
    private func writeUntilNoneWait() async {
        while true {
            let batch = state.withLock { state -> [Waiting] in
                let batch = state.waiting
                state.waiting = []
                if batch.isEmpty { state.writing = false } else { state.transactions += 1 }
                return batch
            }
            guard !batch.isEmpty else { return }
            do {
                let last = try await store.acknowledgeEvents(
                    batch.map { ($0.session, $0.through) },
                    keepingAfter: floor
                )
                for waiting in batch {
                    if waiting.through > last {
                        waiting.continuation.resume(throwing: Store.acknowledgementBeyond(last: last, waiting.through))
                    } else {
                        waiting.continuation.resume()
                    }
                }
            } catch {
                for waiting in batch { waiting.continuation.resume(throwing: error) }
            }
        }
    }
}
