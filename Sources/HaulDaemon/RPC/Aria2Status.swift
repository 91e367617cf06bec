import Foundation
import Haul

/// A task's GID as aria2's clients know it: 16 hex digits, the first 8 bytes of its id, so
/// the same task has the same GID across restarts.
enum GID {
    static func of(_ id: UUID) -> String {
        withUnsafeBytes(of: id.uuid) { bytes in bytes.prefix(8).map { String(format: "%02x", $0) }.joined() }
    }

    /// Whether `text` can be (a prefix of) a GID: 1 to 16 hex digits.
    static func isValid(_ text: String) -> Bool {
        (1...16).contains(text.utf8.count) && text.utf8.allSatisfy { $0.isHexDigit }
    }
}

extension UInt8 {
    fileprivate var isHexDigit: Bool {
        (48...57).contains(self) || (97...102).contains(self) || (65...70).contains(self)
    }
}

/// A task as aria2's `tellStatus` shows a download: every number a string of digits.
struct Aria2Status {
    /// What aria2 calls the state: active, waiting, paused, error, complete, removed.
    static func status(of state: TaskState) -> String {
        switch state {
        case .running: return "active"
        case .queued, .retrying, .waitingForNetwork: return "waiting"
        case .paused: return "paused"
        case .failed: return "error"
        case .completed: return "complete"
        case .cancelled: return "removed"
        }
    }

    /// aria2's exit status for a failure of this kind (aria2c(1), "EXIT STATUS").
    static func errorCode(_ code: HaulError.Code?) -> String {
        switch code {
        case nil: return "1"
        case .httpStatus?, .notFound?: return "3"  // resource not found (and other HTTP errors)
        case .connection?: return "6"  // network problem
        case .hostNotFound?: return "19"  // name resolution failed
        case .checksumMismatch?: return "32"  // checksum validation failed
        case .diskFull?: return "9"  // not enough disk space
        case .destinationExists?: return "13"  // file already existed
        case .fileSystem?: return "16"  // could not create or open a file
        case .tooManyRedirects?: return "10"
        default: return "1"  // unknown error
        }
    }

    /// The piece length aria2 reports for a download without pieces of its own.
    static let pieceLength: Int64 = 1 << 20

    /// The fields of `info` aria2 has, only those in `keys` when given.
    static func json(_ info: DownloadInfo, progress: DownloadProgress?, keys: Set<String>? = nil) -> JSONValue {
        let total = info.totalBytes ?? progress?.totalBytes ?? 0
        let completed = max(info.bytesCommitted, info.state == .running ? progress?.bytesReceived ?? 0 : 0)
        let speed = info.state == .running ? Int64(progress?.bytesPerSecond ?? 0) : 0
        var fields: [String: JSONValue] = [
            "gid": .string(GID.of(info.id)),
            "status": .string(status(of: info.state)),
            "totalLength": .number(total),
            "completedLength": .number(min(completed, total > 0 ? total : completed)),
            "uploadLength": "0",
            "downloadSpeed": .number(speed),
            "uploadSpeed": "0",
            "connections": .number(info.state == .running ? max(1, info.connections ?? 1) : 0),
            "pieceLength": .number(pieceLength),
            "numPieces": .number(total == 0 ? 0 : (total + pieceLength - 1) / pieceLength),
            "dir": .string(info.directory),
            "files": .array([file(info, total: total, completed: completed)]),
        ]
        if info.state == .failed {
            fields["errorCode"] = .string(errorCode(info.errorCode))
            fields["errorMessage"] = .string(Redaction.text(info.errorMessage ?? ""))
        } else if info.state == .completed {
            fields["errorCode"] = "0"
            fields["errorMessage"] = ""
        }
        if let keys { fields = fields.filter { keys.contains($0.key) } }
        return .object(fields)
    }

    /// The download's one file, as `getFiles` and `tellStatus`'s `files` show it.
    static func file(_ info: DownloadInfo, total: Int64, completed: Int64) -> JSONValue {
        [
            "index": "1",
            "path": .string(info.path ?? ""),
            "length": .number(total),
            "completedLength": .number(completed),
            "selected": "true",
            "uris": .array(uris(info)),
        ]
    }

    /// Every source of the download: aria2 calls one in use `used`, one not yet `waiting`.
    /// Shown as every API answer shows a URL: passwords and secret query values as `***`.
    static func uris(_ info: DownloadInfo) -> [JSONValue] {
        let sources = info.sources.isEmpty ? [info.url] : info.sources.filter { $0.dropped == nil }.map(\.url)
        let used = info.state == .running || info.state == .completed
        return sources.map { ["uri": .string(Redaction.url($0)), "status": used ? "used" : "waiting"] }
    }
}
