import CHaulSystem
import Foundation
import GRDB

// MARK: - Opening: the file, its lock, its checks, migration

extension Store {
    /// How a process reads its store.
    public enum Readers: Sendable {
        /// Reads run beside writes, each on a connection of its own (a `DatabasePool`): for a
        /// process that answers many readers at once, as the daemon does.
        case concurrent
        /// Reads and writes take turns on one connection (a `DatabaseQueue`): for a process
        /// that runs a few downloads and exits, as `haul get` does. Opening costs one
        /// connection instead of one more for each read at once, and writes nothing but an
        /// empty write-ahead log's header.
        case serial
    }

    /// Opens (creating and migrating if needed) the store at `path`.
    /// - Parameter readers: how this process reads it; other processes on the same file read
    ///   and write as they do either way (write-ahead logging, a busy timeout).
    /// - Throws: ``HaulError/Code/store`` when the file cannot be opened or migrated.
    public convenience init(path: String, readers: Readers = .concurrent) throws {
        do {
            let directory = (path as NSString).deletingLastPathComponent
            if !directory.isEmpty { try HaulHome.createDirectory(directory) }
            var configuration = Configuration()
            configuration.busyMode = .timeout(30)
            configuration.foreignKeysEnabled = true
            configuration.prepareDatabase { db in
                // In WAL mode NORMAL syncs at WAL checkpoints, not at every commit. A crash of
                // the process loses nothing; a power cut can lose the last few commits, which
                // only makes a committed offset older than the data on disk: safe, never a hole.
                try db.execute(sql: "PRAGMA synchronous = NORMAL")
            }
            // Opening a new store is not safe between processes: switching it to WAL fails with
            // "database is locked" while another process does the same (no busy timeout
            // applies there), and GRDB's migrator would let both create the tables. A lock
            // file beside the store serialises opening and migrating across processes.
            let lock = open(path + ".lock", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
            guard lock >= 0 else { throw HaulError.fileSystem("create", path: path + ".lock", errno: errno) }
            defer { close(lock) }
            while flock(lock, LOCK_EX) != 0 {
                guard errno == EINTR else { throw HaulError.fileSystem("lock", path: path + ".lock", errno: errno) }
            }
            // A file that is there must be a Haul store: an empty file or another program's
            // database is refused, never taken for a new store. A new one is created whole
            // under another name and renamed into place, so a crash never leaves a half.
            if FileManager.default.fileExists(atPath: path) {
                try Store.checkIsHaulStore(at: path)
            } else {
                try Store.create(at: path)
            }
            // The last connection leaves the WAL at close: a `haul get` would otherwise fold it
            // into the database and remove it (two syncs) at every exit, and the next one make
            // it again and sync its header before its first commit. The next opening reads what
            // is in it; SQLite folds it in whenever it passes 1,000 pages; `closeDatabase()`
            // (the daemon's stop) still folds it in, so a copy of the file alone is whole then.
            var opening = configuration
            opening.prepareDatabase { db in _ = chaul_sqlite_keep_wal_at_close(db.sqliteConnection) }
            let writer: any DatabaseWriter
            switch readers {
            // A pool sets up its WAL at every opening (a write and two syncs when the file has
            // none, as after each clean close) and opens a connection per concurrent read.
            case .concurrent: writer = try DatabasePool(path: path, configuration: opening)
            case .serial:
                writer = try DatabaseQueue(path: path, configuration: opening)
                try Store.startLog(of: writer, at: path)
            }
            writer.add(transactionObserver: StoreFaultObserver(path: path), extent: .databaseLifetime)
            try self.init(writer: writer)
        } catch let error as HaulError {
            throw error
        } catch {
            throw HaulError(.store, "Cannot open the Haul store at \(path)", path: path, underlying: error)
        }
    }

    /// Opens (creating and migrating if needed) the store at `path` on NIO's thread pool:
    /// opening waits for another process's open (a file lock) and syncs a new store to disk,
    /// which must not block Swift's cooperative threads.
    /// - Throws: ``HaulError/Code/store`` when the file cannot be opened or migrated.
    public static func opened(at path: String, readers: Readers = .concurrent) async throws -> Store {
        try await FileIO.run { try Store(path: path, readers: readers) }
    }

    /// Gives an empty write-ahead log its header now. SQLite writes and syncs it, with its
    /// directory when the file is new, at the first write after the log was emptied (a new
    /// store, or one a daemon's stop folded in): `haul get` opens its store while it parses its
    /// options, and its first write is the add a download waits for. A write that changes
    /// nothing (the application id set again) makes the header here instead.
    private static func startLog(of writer: any DatabaseWriter, at path: String) throws {
        var log = stat()
        guard stat(path + "-wal", &log) != 0 || log.st_size == 0 else { return }
        try writer.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA application_id = \(applicationID)") }
    }

    /// `PRAGMA application_id` of a Haul store: "HAUL".
    static let applicationID: Int32 = 0x4841_554C

    /// Refuses a file that is not a Haul store, saying what it is.
    private static func checkIsHaulStore(at path: String) throws {
        func refuse(_ what: String) -> HaulError {
            HaulError(
                .store,
                "\(path) is \(what), not a Haul store; Haul will not use it",
                path: path,
                hint: "Move it away (Haul then creates a new store there), or point HAUL_HOME at another directory"
            )
        }
        var info = stat()
        guard stat(path, &info) == 0 else { throw HaulError.fileSystem("stat", path: path, errno: errno) }
        guard info.st_mode & S_IFMT == S_IFREG else { throw refuse("not a regular file") }
        guard info.st_size > 0 else { throw refuse("an empty file") }
        switch try header(of: path) {
        case .haulStore: return
        case .notSQLite: throw refuse("not a SQLite database")
        case .otherSQLite: break  // An older store, or an id still in the WAL: SQLite answers.
        }
        var configuration = Configuration()
        configuration.readonly = true
        configuration.busyMode = .timeout(30)
        let isHaul: Bool
        do {
            let database = try DatabaseQueue(path: path, configuration: configuration)
            defer { try? database.close() }
            isHaul = try database.read { db in
                if try Int32.fetchOne(db, sql: "PRAGMA application_id") == Store.applicationID { return true }
                // Stores of versions before the application id: the first migration is recorded.
                guard try db.tableExists("grdb_migrations") else { return false }
                return try Bool.fetchOne(
                    db,
                    sql: "SELECT EXISTS (SELECT 1 FROM grdb_migrations WHERE identifier = ?)",
                    arguments: ["v1: tasks and segments"]
                ) ?? false
            }
        } catch let error as DatabaseError where error.resultCode == .SQLITE_NOTADB {
            throw refuse("not a SQLite database")
        }
        guard isHaul else { throw refuse("another program's database") }
    }

    /// What a file's first 100 bytes (SQLite's database header) say it is.
    enum Header: Equatable {
        /// A SQLite database whose application id is Haul's.
        case haulStore
        /// A SQLite database with another application id, or none written to the file yet.
        case otherSQLite
        /// Not a SQLite database: another magic string, or shorter than a header.
        case notSQLite
    }

    /// Reads SQLite's header of the file at `path`: its magic string, and the application id
    /// at offset 68 (big-endian). One read instead of a connection opened and closed (its WAL
    /// and shared-memory files with it) each time a Haul store opens.
    static func header(of path: String) throws -> Header {
        let bytes = try PartFile(readingAt: path).read(at: 0, count: 100)
        guard bytes.count == 100, bytes.starts(with: Array("SQLite format 3\0".utf8)) else { return .notSQLite }
        let id = bytes[68..<72].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        return id == UInt32(bitPattern: applicationID) ? .haulStore : .otherSQLite
    }

    /// Creates a new store at `path`: ``StoreImage`` written under a temporary name, synced,
    /// then renamed into place, so a crash never leaves half of one (only the temporary file,
    /// made again next time). The file is in WAL mode already: the first opening switches
    /// nothing (a rollback journal and three syncs), and finds no migration to run.
    static func create(at path: String) throws {
        let temporary = path + ".new"
        for leftover in ["", "-journal", "-wal", "-shm"] { unlink(temporary + leftover) }
        guard let image = StoreImage.bytes else {
            throw HaulError(.store, "This build of Haul has a damaged image of a new store; build or install it again")
        }
        let descriptor = SystemCall.open(temporary, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard descriptor >= 0 else { throw HaulError.fileSystem("create", path: temporary, errno: errno) }
        do {
            var written = 0
            while written < image.count {
                let count = image.withUnsafeBytes {
                    SystemCall.write(descriptor, $0.baseAddress! + written, image.count - written)
                }
                guard count > 0 || (count < 0 && errno == EINTR) else {
                    throw HaulError.fileSystem("write", path: temporary, errno: count < 0 ? errno : EIO)
                }
                written += max(count, 0)
            }
            guard fsync(descriptor) == 0 else { throw HaulError.fileSystem("sync", path: temporary, errno: errno) }
        } catch {
            _ = SystemCall.close(descriptor)
            unlink(temporary)
            throw error
        }
        _ = SystemCall.close(descriptor)
        guard SystemCall.rename(temporary, path) == 0 else {
            throw HaulError.fileSystem("rename", path: temporary, errno: errno)
        }
    }

    /// A store that lives in memory only, for tests and throwaway downloads.
    public static func inMemory() throws -> Store {
        try Store(writer: DatabaseQueue())
    }

    /// Folds the write-ahead log into the database and empties it, when it holds more than
    /// `bytes` and no other connection is using the store at that moment (nothing waits: the
    /// fold is left for a later time). A store opened with ``Readers/serial`` keeps its log
    /// when its last connection closes, and the next process to open it reads all of the log
    /// to index it: 0.26 ms a MiB on this machine, up to a millisecond more for each
    /// `haul get` when the log is left to grow to SQLite's 1,000 pages. Returns whether it folded.
    @discardableResult
    public func foldLog(ifLargerThan bytes: Int64) async -> Bool {
        // On NIO's thread pool: a fold syncs the log and the database.
        (try? await FileIO.run { self.foldLogNow(ifLargerThan: bytes) }) ?? false
    }

    /// ``foldLog(ifLargerThan:)`` on the calling thread.
    func foldLogNow(ifLargerThan bytes: Int64) -> Bool {
        var log = stat()
        guard stat(writer.path + "-wal", &log) == 0, Int64(log.st_size) > bytes else { return false }
        do {
            return try writer.writeWithoutTransaction { db in
                guard try String.fetchOne(db, sql: "PRAGMA journal_mode") == "wal" else { return false }
                // No waiting for another process's reads or writes: the store's busy timeout
                // is 30 seconds.
                let timeout = try Int.fetchOne(db, sql: "PRAGMA busy_timeout") ?? 0
                try db.execute(sql: "PRAGMA busy_timeout = 0")
                defer { try? db.execute(sql: "PRAGMA busy_timeout = \(timeout)") }
                _ = try db.checkpoint(.truncate)
                return true
            }
        } catch {
            return false
        }
    }

    /// Closes the database (checkpointing its WAL), so nothing is written after this
    /// returns. Any later use of the store fails.
    package func closeDatabase() throws {
        // The WAL folded into the database and emptied first: closing checkpoints only when
        // no other connection is open, and a copy of haul.sqlite alone must hold everything.
        try writer.writeWithoutTransaction { db in
            if try String.fetchOne(db, sql: "PRAGMA journal_mode") == "wal" { _ = try db.checkpoint(.truncate) }
        }
        try writer.close()
    }
}
