import GRDB
import Synchronization

/// Writes to the store from many tasks at once share transactions (group commit).
///
/// The first write to arrive while none runs starts a transaction with itself in it; writes
/// that arrive meanwhile wait for it to end and then share the next one, up to ``limit``
/// together. Each write still runs whole or not at all: several run one after another, and
/// when one throws the transaction is rolled back and they run again, each in a savepoint of its
/// own, so that one that throws undoes only its own changes. Every caller returns once the
/// transaction that holds its write has committed, as with a transaction of its own.
///
/// Sixteen downloads finishing together used to commit three transactions each, one after
/// another, each writing the pages it touched to the log again (the task table's, its
/// indexes', the event log's last page): together they write those pages once.
final class GroupCommit: Sendable {
    /// At most this many writes share one transaction.
    static let limit = 128

    /// One write: `run` applies it (keeping its value), `finish` answers its caller.
    private struct Job: Sendable {
        let run: @Sendable (Database) throws -> Void
        let finish: @Sendable (Result<Void, any Error>) -> Void
    }

    private struct State {
        var queue: [Job] = []
        var running = false
    }

    private let writer: any DatabaseWriter
    private let state = Mutex(State())

    init(writer: any DatabaseWriter) {
        self.writer = writer
    }

    /// Runs `body` in a transaction, possibly shared with other writes, and returns its value
    /// once that transaction has committed; throws what `body` threw (its changes undone), or
    /// the error that stopped the transaction.
    func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        let value = Slot<T>()
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
            let job = Job(
                run: { db in
                    let result = try body(db)
                    value.held.withLock { $0 = result }
                },
                finish: { continuation.resume(with: $0) }
            )
            let lead = state.withLock { state -> Bool in
                state.queue.append(job)
                guard !state.running else { return false }
                state.running = true
                return true
            }
            if lead { writer.asyncWriteWithoutTransaction { db in self.drain(db) } }
        }
        // The job ran without throwing, so its value is there.
        return value.held.withLock { $0! }
    }

    /// Where a write's value waits for its caller.
    private final class Slot<T: Sendable>: Sendable {
        let held = Mutex<T?>(nil)
    }

    /// How many writes wait for the transaction that runs (for tests).
    var waiting: Int { state.withLock { $0.queue.count } }

    /// Commits what waits, a transaction at a time, until nothing does.
    private func drain(_ db: Database) {
        while true {
            let jobs = state.withLock { state -> [Job] in
                guard !state.queue.isEmpty else {
                    state.running = false
                    return []
                }
                let taken = Array(state.queue.prefix(Self.limit))
                state.queue.removeFirst(taken.count)
                return taken
            }
            if jobs.isEmpty { return }
            let (outcomes, notRun) = commit(jobs, in: db)
            if !notRun.isEmpty { state.withLock { $0.queue.insert(contentsOf: notRun, at: 0) } }
            for (job, outcome) in zip(jobs, outcomes) { job.finish(outcome) }
        }
    }

    /// Runs `jobs` in one transaction: each job's outcome, in order, and the jobs not run
    /// because SQLite gave up the whole transaction (they go in the next one).
    private func commit(_ jobs: [Job], in db: Database) -> ([Result<Void, any Error>], [Job]) {
        if jobs.count == 1 {
            do {
                try db.inTransaction(.immediate) {
                    try jobs[0].run(db)
                    return .commit
                }
                return ([.success(())], [])
            } catch {
                return ([.failure(error)], [])
            }
        }
        if let outcomes = commitTogether(jobs, in: db) { return (outcomes, []) }
        return commitEachInSavepoint(jobs, in: db)
    }

    /// A job threw in ``commitTogether(_:in:)``: the transaction is rolled back.
    private struct JobThrew: Error {}

    /// Runs `jobs` one after another in one transaction, without a savepoint each: what
    /// almost every batch needs, and two statements a job fewer (GRDB prepares a savepoint's
    /// statements anew each time). Nil when a job threw: nothing of the batch is kept, and it
    /// runs again a savepoint a job (``commitEachInSavepoint(_:in:)``), whose outcomes are then
    /// those a savepoint a job always gave (the jobs are functions of the database alone).
    private func commitTogether(_ jobs: [Job], in db: Database) -> [Result<Void, any Error>]? {
        do {
            try db.inTransaction(.immediate) {
                for job in jobs {
                    do { try job.run(db) } catch { throw JobThrew() }
                }
                return .commit
            }
            return Array(repeating: .success(()), count: jobs.count)
        } catch is JobThrew {
            return nil
        } catch {
            // The transaction could not begin or commit: nothing of it is kept.
            return Array(repeating: .failure(error), count: jobs.count)
        }
    }

    /// Runs `jobs` in one transaction, each in a savepoint of its own, so that one that throws
    /// undoes only its own changes: each job's outcome, in order, and the jobs not run because
    /// SQLite gave up the whole transaction (they go in the next one).
    private func commitEachInSavepoint(_ jobs: [Job], in db: Database) -> ([Result<Void, any Error>], [Job]) {
        var outcomes: [Result<Void, any Error>] = []
        var notRun: [Job] = []
        do {
            try db.inTransaction(.immediate) {
                for (index, job) in jobs.enumerated() {
                    do {
                        try db.inSavepoint {
                            try job.run(db)
                            return .commit
                        }
                        outcomes.append(.success(()))
                    } catch  where !db.isInsideTransaction {
                        // SQLite rolled the whole transaction back (a full disk, an I/O error):
                        // the jobs before this one are undone too, the later ones never ran.
                        notRun = Array(jobs[(index + 1)...])
                        throw error
                    } catch {
                        outcomes.append(.failure(error))
                    }
                }
                return .commit
            }
            return (outcomes, [])
        } catch {
            let ran = jobs.count - notRun.count
            return (Array(repeating: .failure(error), count: ran), notRun)
        }
    }
}
