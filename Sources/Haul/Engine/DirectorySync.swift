import Foundation

/// Makes renames into a directory durable with as few directory syncs as it takes.
///
/// A file moved into place is durable once its directory is synced after the rename. When
/// many downloads finish in one directory at once, one `fsync` made after all their renames
/// covers them all: a caller asks for a sync after its rename and returns once a sync that
/// *began* after its request has ended — its own, or one another caller began meanwhile
/// (group commit). Sixteen downloads finishing together cost a few directory syncs instead
/// of sixteen in a row, each waiting on the file system's journal.
///
/// Callers block: it runs on ``FileIO``'s threads, never on Swift's cooperative pool.
final class DirectorySync: @unchecked Sendable {
    static let shared = DirectorySync(syncing: DirectorySync.fsyncDirectory)

    /// Syncs one directory (`fsync`; a test's stand-in counts and holds them).
    private let syncDirectory: @Sendable (String) -> Void

    init(syncing: @escaping @Sendable (String) -> Void) {
        self.syncDirectory = syncing
    }

    private struct Directory {
        /// Requests made so far; a request is numbered after its rename.
        var requested: UInt64 = 0
        /// Every request numbered up to this one is covered by a sync that has ended.
        var synced: UInt64 = 0
        var syncing = false
        var waiting = 0
    }

    /// Guards `directories`; callers wait on it for another caller's sync.
    private let condition = NSCondition()
    private var directories: [String: Directory] = [:]

    /// Returns once `path` was synced after this call began (ignoring a directory that
    /// cannot be opened or synced, as a rename's sync always has: the rename itself stands).
    func sync(_ path: String) {
        condition.lock()
        defer { condition.unlock() }
        directories[path, default: Directory()].requested += 1
        let ticket = directories[path]!.requested
        while directories[path]!.synced < ticket {
            if directories[path]!.syncing {
                directories[path]!.waiting += 1
                condition.wait()
                directories[path]!.waiting -= 1
                continue
            }
            // Everything requested by now was renamed before this sync begins: it covers them.
            let covers = directories[path]!.requested
            directories[path]!.syncing = true
            condition.unlock()
            syncDirectory(path)
            condition.lock()
            directories[path]!.syncing = false
            directories[path]!.synced = max(directories[path]!.synced, covers)
            condition.broadcast()
        }
        // The last one out forgets the directory, so the table holds only those in use.
        if let entry = directories[path], !entry.syncing, entry.waiting == 0, entry.synced == entry.requested {
            directories[path] = nil
        }
    }

    /// How many syncs of `path` were asked for and are not yet covered by one that ended.
    func outstanding(_ path: String) -> UInt64 {
        condition.lock()
        defer { condition.unlock() }
        return directories[path].map { $0.requested - $0.synced } ?? 0
    }

    /// How many directories have syncs requested or under way (tests: none once all returned).
    var directoriesInUse: Int {
        condition.lock()
        defer { condition.unlock() }
        return directories.count
    }

    private static func fsyncDirectory(_ path: String) {
        let fd = open(path.isEmpty ? "." : path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        _ = SystemCall.close(fd)
    }
}
