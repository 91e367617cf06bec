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
        let descriptor = try HomeFile.open(path, O_RDWR | O_CREAT)
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
        guard let descriptor = try? HomeFile.open(path, O_RDONLY) else { return nil }
        defer { close(descriptor) }
        if flock(descriptor, LOCK_SH | LOCK_NB) == 0 {
            flock(descriptor, LOCK_UN)
            return nil
        }
        return recordedPID(path) ?? 0
    }

    /// Whether process `pid` exists and has not exited (a zombie nobody reaped yet counts
    /// as gone).
    package static func isAlive(_ pid: Int32) -> Bool {
        guard pid > 0, kill(pid, 0) == 0 || errno == EPERM else { return false }
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return true }
        // "pid (comm) S …": the state follows the command name, which may hold spaces.
        return stat[stat.index(after: close)...].trimmingCharacters(in: .whitespaces).first != "Z"
    }

    private static func recordedPID(_ path: String) -> Int32? {
        guard let text = try? HomeFile.read(path) else { return nil }
        return Int32(text.trimmingCharacters(in: .whitespacesAndNewlines))
    }
}
