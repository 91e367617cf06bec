import Foundation
import Haul
import HaulWire
import HaulWireMapping

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// The daemon's own files in `HAUL_HOME` (`daemon.lock`, `daemon.log`, `daemon.token`,
/// `daemon.sock`), opened so that nothing placed there redirects them: symlinks are not
/// followed, and a file that is not what it should be (a symlink, a directory, a file of
/// another user, a hard link) is refused with its path, never written through or deleted.
package enum HomeFile {
    /// Opens (with `O_CREAT` in `flags`, creating 0600) a regular file of this user with
    /// one link.
    /// - Returns: the descriptor, close-on-exec.
    /// - Throws: ``HaulError/Code/fileSystem`` saying what is there instead.
    package static func open(_ path: String, _ flags: Int32) throws -> Int32 {
        guard let descriptor = try openIfPresent(path, flags) else {
            throw HaulError.fileSystem("open", path: path, errno: ENOENT)
        }
        return descriptor
    }

    /// Like ``open(_:_:)``; nil when there is no such file (and `flags` do not create it).
    private static func openIfPresent(_ path: String, _ flags: Int32) throws -> Int32? {
        let descriptor = SystemCall.open(path, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0o600)
        guard descriptor >= 0 else {
            let code = errno
            if code == ENOENT { return nil }
            if code == ELOOP { throw refused(path, "is a symbolic link") }
            throw HaulError.fileSystem("open", path: path, errno: code)
        }
        var info = stat()
        guard fstat(descriptor, &info) == 0 else {
            let code = errno
            close(descriptor)
            throw HaulError.fileSystem("stat", path: path, errno: code)
        }
        let problem: String? =
            if info.st_mode & S_IFMT != S_IFREG { "is not a regular file" } else if info.st_uid != geteuid() {
                "belongs to another user"
            } else if info.st_nlink != 1 { "has other hard links" } else { nil }
        if let problem {
            close(descriptor)
            throw refused(path, problem)
        }
        // O_NONBLOCK only kept a FIFO placed there from blocking the open.
        _ = fcntl(descriptor, F_SETFL, fcntl(descriptor, F_GETFL) & ~O_NONBLOCK)
        return descriptor
    }

    /// Reads a small file opened as ``open(_:_:)`` does; nil when it does not exist.
    package static func read(_ path: String, limit: Int = 4096) throws -> String? {
        guard let descriptor = try openIfPresent(path, O_RDONLY) else { return nil }
        defer { close(descriptor) }
        var buffer = [UInt8](repeating: 0, count: limit)
        let count = SystemCall.read(descriptor, &buffer, limit)
        guard count >= 0 else { throw HaulError.fileSystem("read", path: path, errno: errno) }
        return String(decoding: buffer[..<count], as: UTF8.self)
    }

    /// Makes way for the daemon's socket: removes a socket left by a daemon that died (the
    /// caller holds the lock, so no live daemon listens on it); refuses anything else.
    package static func clearStaleSocket(_ path: String) throws {
        var info = stat()
        guard lstat(path, &info) == 0 else {
            guard errno == ENOENT else { throw HaulError.fileSystem("stat", path: path, errno: errno) }
            return
        }
        guard info.st_mode & S_IFMT == S_IFSOCK else { throw refused(path, "is not a socket") }
        guard unlink(path) == 0 || errno == ENOENT else {
            throw HaulError.fileSystem("remove", path: path, errno: errno)
        }
    }

    /// Removes the daemon's socket when it stops, if a socket is still what is there.
    package static func removeSocket(_ path: String) {
        var info = stat()
        if lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFSOCK { unlink(path) }
    }

    private static func refused(_ path: String, _ problem: String) -> HaulError {
        HaulError(
            .fileSystem,
            "\(path) \(problem); Haul will not use it",
            path: path,
            hint: "Move it away (Haul creates its own), or point HAUL_HOME at another directory"
        )
    }
}
