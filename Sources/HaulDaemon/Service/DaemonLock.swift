import Foundation
import Haul

#if canImport(Glibc)
import Glibc
#endif

/// The lock that makes a daemon the only one of its `HAUL_HOME`: an exclusive `flock` on
/// `daemon.lock`, held for the daemon's life and released by the kernel when it dies (even
/// by `kill -9`), with the holder's pid written inside.
package final class DaemonLock: Sendable {
    private let descriptor: Int32

    private init(descriptor: Int32) {
        self.descriptor = descriptor
    }

    deinit { close(descriptor) }

    /// Takes the lock and records this process's pid in it.
    /// - Throws: ``HaulError/Code/busy`` naming the running daemon's pid when another holds it.
    static func acquire(_ path: String) throws -> DaemonLock {
        let descriptor = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw HaulError.fileSystem("create", path: path, errno: errno) }
        while flock(descriptor, LOCK_EX | LOCK_NB) != 0 {
            if errno == EINTR { continue }
            let code = errno
            close(descriptor)
            guard code == EWOULDBLOCK else { throw HaulError.fileSystem("lock", path: path, errno: code) }
            let pid = DaemonLock.recordedPID(path).map { " (pid \($0))" } ?? ""
            throw HaulError(
                .busy,
                "A Haul daemon is already running for \((path as NSString).deletingLastPathComponent)\(pid)",
                path: path,
                hint: "Stop it with 'haul daemon stop', or use another HAUL_HOME"
            )
        }
        let pid = Data("\(getpid())\n".utf8)
        _ = ftruncate(descriptor, 0)
        _ = pid.withUnsafeBytes { pwrite(descriptor, $0.baseAddress, $0.count, 0) }
        return DaemonLock(descriptor: descriptor)
    }

    /// The pid of the daemon holding the lock, or nil when no daemon holds it.
    package static func holder(_ path: String) -> Int32? {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return nil }
        defer { close(descriptor) }
        if flock(descriptor, LOCK_SH | LOCK_NB) == 0 {
            flock(descriptor, LOCK_UN)
            return nil
        }
        return recordedPID(path) ?? 0
    }

    private static func recordedPID(_ path: String) -> Int32? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        return Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
