import CHaulSystem
import Foundation
import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The part file a download writes into with positioned writes (`<destination>.part`, or
/// another name beside it when that one is taken).
///
/// A part file belongs to exactly one task, and Haul writes only into part files it created
/// itself: ``create(at:owner:)`` makes a new file (never opening an existing one) and marks it
/// with the task's id in the extended attribute `user.haul.task`; ``openOwned(at:owner:identity:)``
/// reopens it only when it is still that file — a regular file with one link, not a symbolic
/// link, carrying the same mark (or, on a file system without extended attributes, the same
/// device and inode the store recorded). Anything else is another task's or another program's
/// file and is left alone.
///
/// One transfer owns it; only ``sync()`` is called from elsewhere (a background checkpoint,
/// safe alongside writes). Every failure is a ``HaulError`` naming the path.
final class PartFile: Sendable {
    let path: String
    private let descriptor: Int32
    private let closed = Mutex(false)
    /// Whether the file is on a local disk's file system (``LocalDisk``).
    let isOnLocalDisk: Bool
    /// How many ``sync()`` calls are under way.
    private let syncs = Atomic(0)

    /// Why an existing part file cannot be used.
    enum Claim: Error, Equatable {
        /// No file at the path.
        case missing
        /// A file is at the path (when creating).
        case exists
        /// The file is not this task's part file; the reason says why.
        case foreign(String)
    }

    /// The extended attribute that names the task a part file belongs to.
    static let ownerAttribute = "user.haul.task"

    /// Takes an exclusive advisory lock on the open descriptor, so two processes never write
    /// one part file; the kernel drops it when the process dies, even by `kill -9`.
    private init(lockingAt path: String, descriptor: Int32) throws {
        if flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            _ = SystemCall.close(descriptor)
            if code == EWOULDBLOCK {
                throw HaulError(
                    .busy,
                    "Another Haul process is already downloading to \(path)",
                    path: path,
                    hint: "Wait for it to finish or stop it first"
                )
            }
            throw HaulError.fileSystem("lock", path: path, errno: code)
        }
        self.path = path
        self.descriptor = descriptor
        isOnLocalDisk = LocalDisk.holds(descriptor)
    }

    /// Device and inode, `"dev:ino"`: the file's identity where extended attributes are
    /// missing (compared by ``FileIdentity/same(_:_:)``); nil when it cannot be read.
    var identity: String? {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { return nil }
        return FileIdentity.of(info)
    }

    /// Creates a new, empty part file at `path` marked as `owner`'s, and locks it.
    /// - Throws: ``Claim/exists`` when any file (or link) is already at `path`;
    ///   ``HaulError`` when the file cannot be created.
    static func create(at path: String, owner: UUID) throws -> PartFile {
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else {
            if errno == EEXIST { throw Claim.exists }
            throw HaulError.fileSystem("create", path: path, errno: errno)
        }
        let file = try PartFile(lockingAt: path, descriptor: fd)
        let mark = Array(owner.uuidString.lowercased().utf8)
        if chaul_fsetxattr(fd, ownerAttribute, mark, mark.count) != 0, !PartFile.unsupported(errno) {
            let code = errno
            file.close()
            unlink(path)
            throw HaulError.fileSystem("mark", path: path, errno: code)
        }
        return file
    }

    /// Opens `owner`'s existing part file at `path` and locks it.
    /// - Parameter identity: the device and inode recorded when the file was created, checked
    ///   where the file system keeps no extended attributes.
    /// - Throws: ``Claim/missing``, ``Claim/foreign(_:)``, or ``HaulError`` (busy, I/O).
    static func openOwned(at path: String, owner: UUID, identity: String?) throws -> PartFile {
        let (fd, info) = try openSingleRegularFile(path)
        func refuse(_ reason: String) -> Claim {
            _ = SystemCall.close(fd)
            return Claim.foreign(reason)
        }
        switch PartFile.mark(of: fd) {
        case .owner(let mark):
            guard mark == owner.uuidString.lowercased() else {
                throw refuse("it belongs to another download (\(mark))")
            }
        case .none:
            throw refuse("Haul did not create it")
        case .unsupported:
            // No extended attributes here: the store's record of the file is the proof.
            guard let identity, FileIdentity.same(identity, FileIdentity.of(info)) else {
                throw refuse("Haul did not create it")
            }
        }
        return try PartFile(lockingAt: path, descriptor: fd)
    }

    /// Takes a file Haul did not create as `owner`'s part file (`--continue`): opens and
    /// locks it, moves it to `partPath` when given (never over another file), and marks it.
    /// - Throws: ``Claim/missing``; ``Claim/foreign(_:)`` for a link, anything but a regular
    ///   file, or a file with other hard links (writing it would change another name's
    ///   content); ``Claim/exists`` when `partPath` is taken; ``HaulError`` (busy, I/O).
    static func adopt(at path: String, movingTo partPath: String? = nil, owner: UUID) throws -> PartFile {
        let (fd, _) = try openSingleRegularFile(path)
        let file = try PartFile(lockingAt: partPath ?? path, descriptor: fd)
        if let partPath, chaul_rename_noreplace(path, partPath) != 0 {
            let code = errno
            file.close()
            if code == EEXIST { throw Claim.exists }
            throw HaulError.fileSystem("move", path: path, errno: code)
        }
        let mark = Array(owner.uuidString.lowercased().utf8)
        if chaul_fsetxattr(fd, ownerAttribute, mark, mark.count) != 0, !PartFile.unsupported(errno) {
            let code = errno
            if let partPath { _ = chaul_rename_noreplace(partPath, path) }
            file.close()
            throw HaulError.fileSystem("mark", path: partPath ?? path, errno: code)
        }
        return file
    }

    /// Opens a regular file with no other hard links, read-write, without following a link.
    /// - Throws: ``Claim/missing``, ``Claim/foreign(_:)``, or ``HaulError``.
    private static func openSingleRegularFile(_ path: String) throws -> (Int32, stat) {
        let fd = SystemCall.open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else {
            switch errno {
            case ENOENT: throw Claim.missing
            case ELOOP: throw Claim.foreign("it is a symbolic link")
            default: throw HaulError.fileSystem("open", path: path, errno: errno)
            }
        }
        var info = stat()
        guard fstat(fd, &info) == 0 else {
            let code = errno
            _ = SystemCall.close(fd)
            throw HaulError.fileSystem("stat", path: path, errno: code)
        }
        func refuse(_ reason: String) -> Claim {
            _ = SystemCall.close(fd)
            return Claim.foreign(reason)
        }
        guard (info.st_mode & S_IFMT) == S_IFREG else { throw refuse("it is not a regular file") }
        guard info.st_nlink == 1 else { throw refuse("it has \(info.st_nlink) hard links") }
        return (fd, info)
    }

    /// What a file's owner mark says.
    private enum Mark {
        case owner(String)
        case none
        /// The file system keeps no extended attributes.
        case unsupported
    }

    private static func mark(of fd: Int32) -> Mark {
        var buffer = [UInt8](repeating: 0, count: 64)
        let n = chaul_fgetxattr(fd, ownerAttribute, &buffer, buffer.count)
        guard n >= 0 else { return unsupported(errno) ? .unsupported : .none }
        return .owner(String(decoding: buffer.prefix(n), as: UTF8.self))
    }

    private static func unsupported(_ code: Int32) -> Bool { code == ENOTSUP || code == EOPNOTSUPP }

    /// Deletes this part file, which this open handle holds locked, before it is closed.
    /// Reopening it to delete it after a close (``remove(at:owner:identity:)``) can find it
    /// still locked: a sync in flight on another thread (a background checkpoint) keeps the
    /// file's lock until it returns, and the file would be left behind.
    func delete() {
        guard !closed.withLock({ $0 }) else { return }
        unlink(path)
    }

    /// Deletes `owner`'s part file at `path`, and nothing that is not it.
    static func remove(at path: String, owner: UUID, identity: String?) {
        guard let file = try? PartFile.openOwned(at: path, owner: owner, identity: identity) else { return }
        unlink(path)
        file.close()
    }

    /// Sets an extended attribute; false where the file system keeps none, or it failed.
    func setAttribute(_ name: String, to value: String) -> Bool {
        let bytes = Array(value.utf8)
        return chaul_fsetxattr(descriptor, name, bytes, bytes.count) == 0
    }

    /// Removes the ownership mark, before the finished file is moved into place.
    func unmark() {
        _ = chaul_fremovexattr(descriptor, PartFile.ownerAttribute)
    }

    /// Opens an existing file read-only: a finished download to verify, or a store's header to read.
    init(readingAt path: String) throws {
        self.path = path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw HaulError.fileSystem("open", path: path, errno: errno) }
        self.descriptor = fd
        isOnLocalDisk = LocalDisk.holds(fd)
    }

    deinit {
        close()
    }

    func close() {
        let wasClosed = closed.withLock { closed in
            defer { closed = true }
            return closed
        }
        if !wasClosed { _ = SystemCall.close(descriptor) }
    }

    /// The current size on disk.
    func size() throws -> Int64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw HaulError.fileSystem("stat", path: path, errno: errno) }
        return Int64(info.st_size)
    }

    /// Writes the buffers back to back starting at `offset` (``GatherWrite``).
    func write(_ buffers: [ByteBuffer], at offset: Int64) throws {
        guard let end = GatherWrite.write(buffers, to: descriptor, at: offset) else {
            throw HaulError.fileSystem("write to", path: path, errno: errno)
        }
        startWriteback(from: offset, to: end)
    }

    /// The file goes to the disk in windows this big (one request costs less CPU than 32 small).
    static let writebackWindow: Int64 = 8 << 20

    /// Starts the disk on the window of the file that a write from `start` to `end` finished,
    /// while more bytes arrive (the next checkpoint or the completing sync makes them durable).
    /// Not during a sync, which writes the file out already (a request for more waited behind
    /// it for 120 ms, on an event loop): the next checkpoint's sync takes the window left.
    private func startWriteback(from start: Int64, to end: Int64) {
        let window = PartFile.writebackWindow
        let finished = end / window * window
        guard finished > start / window * window, !isSyncing else { return }
        _ = chaul_start_writeback(descriptor, off_t(finished - window), off_t(window))
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws {
        guard let base = bytes.baseAddress else { return }
        let written = try positioned(bytes.count, at: offset, "write to") { done, at in
            pwrite(descriptor, base + done, bytes.count - done, at)
        }
        // A write that wrote nothing, and said no error: the disk took no more.
        guard written == bytes.count else { throw HaulError.fileSystem("write to", path: path, errno: EIO) }
    }

    /// Reads up to `count` bytes at `offset`; fewer only at end of file.
    func read(at offset: Int64, count: Int) throws -> [UInt8] {
        var result = [UInt8](repeating: 0, count: count)
        let filled = try result.withUnsafeMutableBytes { try read(into: $0, at: offset) }
        result.removeLast(count - filled)
        return result
    }

    /// Fills `buffer` from `offset`, or less when the file ends first; returns how much.
    private func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws -> Int {
        guard let base = buffer.baseAddress else { return 0 }
        return try positioned(buffer.count, at: offset, "read") { done, at in
            pread(descriptor, base + done, buffer.count - done, at)
        }
    }

    /// Runs `call` (a positioned read or write of the bytes from `done` on, at file offset
    /// `at`) until `count` bytes are done, again after `EINTR`, and stops early when a call
    /// does nothing (a read at the end of the file); returns how many were done.
    private func positioned(
        _ count: Int,
        at offset: Int64,
        _ action: String,
        _ call: (_ done: Int, _ at: off_t) -> Int
    ) throws -> Int {
        var done = 0
        while done < count {
            let result = call(done, off_t(offset + Int64(done)))
            if result < 0 {
                if errno == EINTR { continue }
                throw HaulError.fileSystem(action, path: path, errno: errno)
            }
            if result == 0 { break }
            done += result
        }
        return done
    }

    /// Makes written data durable (data, and the size when it grew).
    func sync() throws {
        let started = ContinuousClock.now
        try syncing {
            guard fdatasync(descriptor) == 0 else { throw HaulError.fileSystem("sync", path: path, errno: errno) }
        }
        HaulMetrics.fsync(ContinuousClock.now - started)
    }

    /// Runs `body` as a sync: ``isSyncing`` while it runs.
    func syncing<T>(_ body: () throws -> T) rethrows -> T {
        syncs.add(1, ordering: .relaxed)
        defer { syncs.subtract(1, ordering: .relaxed) }
        return try body()
    }

    /// Whether a ``sync()`` is under way (a write meanwhile may wait for it).
    var isSyncing: Bool { syncs.load(ordering: .relaxed) > 0 }

    /// Sets the file's modification time (its access time is left alone); false when the
    /// file system refused.
    @discardableResult
    func setModificationTime(_ date: Date) -> Bool {
        let seconds = date.timeIntervalSince1970
        let whole = floor(seconds)
        // UTIME_OMIT, a macro Swift does not import: leave the access time as it is.
        let omit = (1 << 30) - 2
        var times = [
            timespec(tv_sec: 0, tv_nsec: omit),
            timespec(tv_sec: time_t(whole), tv_nsec: Int((seconds - whole) * 1e9)),
        ]
        return futimens(descriptor, &times) == 0
    }

    /// Cuts or extends the file to `length` bytes.
    func truncate(to length: Int64) throws {
        guard ftruncate(descriptor, off_t(length)) == 0 else {
            throw HaulError.fileSystem("truncate", path: path, errno: errno)
        }
    }

    /// Digest of the first `length` bytes, read in 1 MiB blocks.
    func digest(_ algorithm: Checksum.Algorithm, length: Int64) throws -> String {
        var digest = AnyDigest(algorithm)
        try feed(&digest, bytes: 0..<length)
        return digest.finalizeHex()
    }

    /// Digest of `bytes` (a piece): nil when the file ends before them.
    func digest(_ algorithm: Checksum.Algorithm, of bytes: Range<Int64>) throws -> [UInt8]? {
        var digest = AnyDigest(algorithm)
        guard try feed(&digest, bytes: bytes) == bytes.upperBound else { return nil }
        return digest.finalize()
    }

    /// Reads `bytes` into `digest` in 1 MiB blocks; returns where it stopped (the end of
    /// the file when it comes first).
    @discardableResult
    private func feed(_ digest: inout AnyDigest, bytes: Range<Int64>) throws -> Int64 {
        let block = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: block, alignment: 16)
        defer { buffer.deallocate() }
        var offset = bytes.lowerBound
        while offset < bytes.upperBound {
            let want = Int(min(Int64(block), bytes.upperBound - offset))
            let n = try read(into: UnsafeMutableRawBufferPointer(rebasing: buffer[0..<want]), at: offset)
            if n == 0 { break }
            digest.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            offset += Int64(n)
        }
        return offset
    }
}
