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

/// The `<destination>.part` file a download writes into with positioned writes.
///
/// One transfer owns it; the only call made from elsewhere is ``sync()``, by a background
/// checkpoint, which is safe alongside writes. Every failure is a ``HaulError`` naming the path.
final class PartFile: Sendable {
    let path: String
    private let descriptor: Int32
    private let closed = Mutex(false)

    /// Opens (creating if needed) the part file for reading and writing.
    ///
    /// With `lock`, takes an exclusive advisory lock so two processes never write one part
    /// file; the kernel drops the lock when the process dies, even by `kill -9`.
    init(path: String, lock: Bool) throws {
        self.path = path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else { throw HaulError.fileSystem("create", path: path, errno: errno) }
        if lock, flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            _ = systemClose(fd)
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
        self.descriptor = fd
    }

    /// Opens an existing file read-only (a finished download, to verify it).
    init(readingAt path: String) throws {
        self.path = path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw HaulError.fileSystem("open", path: path, errno: errno) }
        self.descriptor = fd
    }

    deinit {
        close()
    }

    func close() {
        let wasClosed = closed.withLock { closed in
            defer { closed = true }
            return closed
        }
        if !wasClosed { _ = systemClose(descriptor) }
    }

    /// The current size on disk.
    func size() throws -> Int64 {
        var info = stat()
        guard fstat(descriptor, &info) == 0 else { throw HaulError.fileSystem("stat", path: path, errno: errno) }
        return Int64(info.st_size)
    }

    /// Writes all of `buffer` at `offset`.
    func write(_ buffer: ByteBuffer, at offset: Int64) throws {
        try buffer.withUnsafeReadableBytes { bytes in
            try write(bytes, at: offset)
        }
    }

    /// Writes the buffers back to back starting at `offset`, in as few `pwritev` calls as
    /// the kernel allows.
    func write(_ buffers: [ByteBuffer], at offset: Int64) throws {
        // The pointers stay valid while `buffers` holds the storage and nothing mutates it.
        var vectors = buffers.map { buffer in
            buffer.withUnsafeReadableBytes {
                iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count)
            }
        }
        var total = vectors.reduce(0) { $0 + $1.iov_len }
        var position = offset
        var first = 0
        try withExtendedLifetime(buffers) {
            while total > 0 {
                let written = vectors[first...].withUnsafeBufferPointer { slice in
                    pwritev(descriptor, slice.baseAddress, Int32(min(slice.count, 1024)), off_t(position))
                }
                if written < 0 {
                    if errno == EINTR { continue }
                    throw HaulError.fileSystem("write to", path: path, errno: errno)
                }
                total -= written
                position += Int64(written)
                // Skip what was written; a partial write may end inside a vector.
                var left = written
                while left > 0, first < vectors.count {
                    if left >= vectors[first].iov_len {
                        left -= vectors[first].iov_len
                        first += 1
                    } else {
                        vectors[first].iov_base += left
                        vectors[first].iov_len -= left
                        left = 0
                    }
                }
            }
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer, at offset: Int64) throws {
        var written = 0
        while written < bytes.count {
            let result = pwrite(
                descriptor,
                bytes.baseAddress! + written,
                bytes.count - written,
                off_t(offset + Int64(written))
            )
            if result < 0 {
                if errno == EINTR { continue }
                throw HaulError.fileSystem("write to", path: path, errno: errno)
            }
            written += result
        }
    }

    /// Reads up to `count` bytes at `offset`; fewer only at end of file.
    func read(at offset: Int64, count: Int) throws -> [UInt8] {
        var result = [UInt8](repeating: 0, count: count)
        var filled = 0
        try result.withUnsafeMutableBytes { bytes in
            while filled < count {
                let n = pread(descriptor, bytes.baseAddress! + filled, count - filled, off_t(offset + Int64(filled)))
                if n < 0 {
                    if errno == EINTR { continue }
                    throw HaulError.fileSystem("read", path: path, errno: errno)
                }
                if n == 0 { break }
                filled += n
            }
        }
        result.removeLast(count - filled)
        return result
    }

    /// Makes written data durable (data, and the size when it grew).
    func sync() throws {
        guard fdatasync(descriptor) == 0 else { throw HaulError.fileSystem("sync", path: path, errno: errno) }
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
        let block = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: block, alignment: 16)
        defer { buffer.deallocate() }
        var offset: Int64 = 0
        while offset < length {
            let want = Int(min(Int64(block), length - offset))
            let n = pread(descriptor, buffer.baseAddress!, want, off_t(offset))
            if n < 0 {
                if errno == EINTR { continue }
                throw HaulError.fileSystem("read", path: path, errno: errno)
            }
            if n == 0 { break }
            digest.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            offset += Int64(n)
        }
        return digest.finalizeHex()
    }
}

/// File-system helpers the engine needs around the part file.
enum FileOps {
    static func exists(_ path: String) -> Bool {
        var info = stat()
        return lstat(path, &info) == 0
    }

    static func size(_ path: String) -> Int64? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return Int64(info.st_size)
    }

    static func isDirectory(_ path: String) -> Bool {
        var info = stat()
        return stat(path, &info) == 0 && (info.st_mode & S_IFMT) == S_IFDIR
    }

    static func remove(_ path: String) {
        _ = unlink(path)
    }

    /// Atomically moves the verified part file into place, then syncs the directory so the
    /// rename itself survives a crash.
    static func rename(_ from: String, to: String) throws {
        guard systemRename(from, to) == 0 else { throw HaulError.fileSystem("move into place", path: to, errno: errno) }
        let directory = (to as NSString).deletingLastPathComponent
        let fd = open(directory.isEmpty ? "." : directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if fd >= 0 {
            _ = fsync(fd)
            _ = systemClose(fd)
        }
    }

    /// Checks that `directory` exists and we can create files in it.
    static func checkWritableDirectory(_ directory: String) throws {
        guard isDirectory(directory) else {
            throw HaulError(
                .fileSystem,
                "Destination directory \(directory) does not exist",
                path: directory,
                hint: "Create it first or choose another with -d"
            )
        }
        guard access(directory, W_OK | X_OK) == 0 else {
            throw HaulError.fileSystem("write into", path: directory, errno: errno)
        }
    }
}

private func systemClose(_ fd: Int32) -> Int32 {
    #if canImport(Darwin)
    Darwin.close(fd)
    #else
    Glibc.close(fd)
    #endif
}

private func systemRename(_ from: String, _ to: String) -> Int32 {
    #if canImport(Darwin)
    Darwin.rename(from, to)
    #else
    Glibc.rename(from, to)
    #endif
}
