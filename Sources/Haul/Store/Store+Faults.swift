import GRDB
import Synchronization

/// Write faults injected into a store, for tests of what Haul does when its store cannot
/// be written: the disk under `HAUL_HOME` full, say.
///
/// A real small disk does not produce that on demand: SQLite reuses the space of its
/// write-ahead log, so which write fails, if any, depends on timing. Marked full, every
/// commit to the store at a path fails as SQLite fails on a full disk (`SQLITE_FULL`), and
/// rolls back; reads go on. Only a test sets it.
package enum StoreFaults {
    private static let fullPaths = Mutex<Set<String>>([])

    /// Makes every commit to the store at `path` fail as on a full disk, or stops that.
    package static func setFull(_ isFull: Bool, atPath path: String) {
        fullPaths.withLock { paths in
            if isFull { paths.insert(path) } else { paths.remove(path) }
        }
    }

    static func isFull(_ path: String) -> Bool {
        fullPaths.withLock { !$0.isEmpty && $0.contains(path) }
    }
}

/// Vetoes the commits of a store marked full in ``StoreFaults``.
final class StoreFaultObserver: TransactionObserver {
    let path: String

    init(path: String) {
        self.path = path
    }

    func observes(eventsOfKind eventKind: DatabaseEventKind) -> Bool { false }
    func databaseDidChange(with event: DatabaseEvent) {}
    func databaseDidCommit(_ db: Database) {}
    func databaseDidRollback(_ db: Database) {}

    func databaseWillCommit() throws {
        if StoreFaults.isFull(path) {
            throw DatabaseError(resultCode: .SQLITE_FULL, message: "database or disk is full")
        }
    }
}
