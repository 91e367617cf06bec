import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A file's identity where extended attributes are missing: its device and inode,
/// `"dev:ino"`, as the store records it for a part file.
enum FileIdentity {
    /// The device's and inode's identity of a file's `stat`.
    static func of(_ info: stat) -> String { "\(info.st_dev):\(info.st_ino)" }

    /// Whether two identities (`"dev:ino"`) name one file. The inodes must match; the
    /// devices need not: machines that mount one share (NFS) give it different device
    /// numbers, while the inode is the file's id on the server — so a daemon on another machine
    /// that takes over a task finds the part file another machine was writing.
    static func same(_ recorded: String, _ actual: String) -> Bool {
        func inode(_ identity: String) -> Substring? {
            let parts = identity.split(separator: ":")
            guard parts.count == 2, UInt64(parts[0]) != nil, UInt64(parts[1]) != nil else { return nil }
            return parts[1]
        }
        guard let recordedInode = inode(recorded), let actualInode = inode(actual) else { return false }
        return recordedInode == actualInode
    }

    /// The identity of the regular file at `path` (not following a link); nil when there is none.
    static func at(_ path: String) -> String? {
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
        return of(info)
    }
}
