import Foundation
import Haul

/// The file `haul ui` hands the browser instead of the login link: a page that sends the
/// browser on to the link, readable by its owner only (0600, in the 0700 Haul home). A
/// program's arguments are readable by every user of the machine (`/proc/PID/cmdline`), so
/// the link itself never goes there; the file's path holds no secret. Jupyter opens its
/// browser the same way.
enum LoginFile {
    /// How long a file is kept: a link works for five minutes.
    static let lifetime: TimeInterval = 300
    static let prefix = "ui-login-"

    /// Writes a new file for `link` in `home` and returns its `file://` URL; files of
    /// earlier runs whose links have expired are removed.
    /// - Throws: ``HaulError`` (`fileSystem`) when the file cannot be created.
    static func write(link: String, in home: HaulHome, now: Date = Date()) throws -> String {
        removeExpired(in: home.path, now: now)
        var generator = SystemRandomNumberGenerator()
        let name = prefix + String(UInt64.random(in: .min ... .max, using: &generator), radix: 16) + ".html"
        let path = (home.path as NSString).appendingPathComponent(name)
        let descriptor = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else { throw HaulError.fileSystem("create", path: path, errno: errno) }
        defer { close(descriptor) }
        let bytes = Array(page(link: link).utf8)
        let written = bytes.withUnsafeBytes { Foundation.write(descriptor, $0.baseAddress, $0.count) }
        guard written == bytes.count else {
            let code = errno
            unlink(path)
            throw HaulError.fileSystem("write", path: path, errno: code)
        }
        return URL(fileURLWithPath: path).absoluteString
    }

    /// The page: an immediate redirect, and the link to click should it not happen.
    static func page(link: String) -> String {
        let escaped = link.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "\"", with: "&quot;")
            .replacingOccurrences(of: "<", with: "&lt;").replacingOccurrences(of: ">", with: "&gt;")
        return """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8">
            <meta http-equiv="refresh" content="0;url=\(escaped)">
            <meta name="referrer" content="no-referrer">
            <title>Haul</title></head>
            <body><p><a href="\(escaped)">Open the Haul dashboard</a></p></body></html>

            """
    }

    /// Removes this command's files older than ``lifetime`` (their links no longer work).
    static func removeExpired(in directory: String, now: Date) {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        for name in names where name.hasPrefix(prefix) && name.hasSuffix(".html") {
            let path = (directory as NSString).appendingPathComponent(name)
            var info = stat()
            guard lstat(path, &info) == 0 else { continue }
            let modified = Date(timeIntervalSince1970: TimeInterval(info.st_mtim.tv_sec))
            if now.timeIntervalSince(modified) > lifetime { unlink(path) }
        }
    }
}
