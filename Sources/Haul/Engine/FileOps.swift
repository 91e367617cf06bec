import CHaulSystem
import Foundation

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

    /// The size and modification time of the regular file at `path` (symbolic links
    /// followed); nil for anything else.
    static func regularFile(_ path: String) -> (size: Int64, modified: Date)? {
        var info = stat()
        guard stat(path, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else { return nil }
        let modified = Date(
            timeIntervalSince1970: TimeInterval(info.st_mtim.tv_sec) + TimeInterval(info.st_mtim.tv_nsec) / 1e9
        )
        return (Int64(info.st_size), modified)
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
    /// Never replaces a file at `to` unless `replacing`: a file that appeared there since the
    /// last check stays, and the move fails.
    static func rename(_ from: String, to: String, replacing: Bool) throws {
        let moved = replacing ? SystemCall.rename(from, to) : chaul_rename_noreplace(from, to)
        guard moved == 0 else {
            if errno == EEXIST { throw HaulError.destinationExists(to) }
            throw HaulError.fileSystem("move into place", path: to, errno: errno)
        }
        // One sync for the renames of downloads finishing together in the directory.
        DirectorySync.shared.sync((to as NSString).deletingLastPathComponent)
    }

    /// Checks that `directory` exists and we can create files in it.
    static func checkWritableDirectory(_ directory: String) throws {
        // The system would read a path only up to a NUL: "/tmp/\0x" would be "/tmp/".
        guard !directory.utf8.contains(0), directory.utf8.count < PATH_MAX else {
            throw HaulError(
                .invalidArgument,
                "Invalid directory '\(directory.prefix(80))': it holds a NUL or is longer than \(PATH_MAX - 1) bytes"
            )
        }
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
