import Crypto
import Foundation

/// Chooses a safe file name for a download and keeps it inside its directory.
///
/// Order: the name the user gave; else the server's `Content-Disposition` (`filename*=`
/// before `filename=`); else the URL's last path component, percent-decoded; else a name
/// made from the URL's hash. Every candidate is sanitised: a name from a server can never
/// climb out of the target directory, be empty, be `.` or `..`, or hold NUL or `/`.
enum FileNaming {
    /// The file name for a download into `directory`.
    static func fileName(contentDisposition: String?, url: URL) -> String {
        if let contentDisposition, let suggested = suggestedName(fromContentDisposition: contentDisposition),
            let name = sanitize(suggested)
        {
            return name
        }
        if let name = nameFromURL(url) { return name }
        return hashedName(for: url)
    }

    /// The last path component of the URL, percent-decoded and sanitised; nil when there is none.
    static func nameFromURL(_ url: URL) -> String? {
        // The path as the URL holds it: re-parsing the URL into components cost a daemon adding
        // thousands of downloads about 1 % of its CPU.
        let path = url.path(percentEncoded: true)
        guard let last = path.split(separator: "/").last else { return nil }
        let decoded = String(last).removingPercentEncoding ?? String(last)
        return sanitize(decoded)
    }

    /// `download-<16 hex digits of SHA-256(url)>`, the name of last resort.
    static func hashedName(for url: URL) -> String {
        let digest = SHA256.hash(data: Data(url.absoluteString.utf8))
        return "download-" + digest.prefix(8).map { String(format: "%02x", $0) }.joined()
    }

    /// Whether a name is one plain file name: not empty, not `.` or `..`, no `/`, NUL or
    /// other control characters.
    static func isPlainName(_ name: String) -> Bool {
        !name.isEmpty && name != "." && name != ".." && !name.contains("/")
            && !name.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }

    /// Makes a server- or URL-supplied name safe, or returns nil when nothing usable is left.
    static func sanitize(_ raw: String) -> String? {
        // Only the last component counts, whatever separator a hostile server used.
        let lastComponent = raw.split(whereSeparator: { $0 == "/" || $0 == "\\" }).last.map(String.init) ?? ""
        var scalars = String.UnicodeScalarView()
        for scalar in lastComponent.unicodeScalars {
            // Drop NUL, C0/C1 controls and DEL; they have no business in a file name.
            if scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value) { continue }
            scalars.append(scalar)
        }
        var name = String(scalars).trimmingWhitespace()
        // A leading dot would hide the file or make it `.`/`..`; trailing dots and spaces confuse other systems.
        while name.hasPrefix(".") { name.removeFirst() }
        while name.hasSuffix(".") || name.hasSuffix(" ") { name.removeLast() }
        guard !name.isEmpty else { return nil }
        return shortened(name)
    }

    /// The longest name taken from a server or a URL, in bytes: a file name has at most 255
    /// (NAME_MAX), and the part file beside it adds up to 42 (`.<task id>.part`).
    static let maxNameBytes = 255 - 42

    /// `name` cut to ``maxNameBytes``, between characters (never inside a UTF-8 sequence or a
    /// grapheme), keeping its extension when it has a short one: `aaaa….tar.gz` stays a
    /// `.tar.gz`.
    static func shortened(_ name: String) -> String {
        guard name.utf8.count > maxNameBytes else { return name }
        var keep = ""
        var rest = Substring(name)
        // Up to two short extensions (`.tar.gz`), each at most 16 bytes of letters and digits.
        for _ in 0..<2 {
            guard let dot = rest.lastIndex(of: "."), dot > rest.startIndex else { break }
            let ext = rest[rest.index(after: dot)...]
            guard (1...16).contains(ext.utf8.count), ext.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber) })
            else { break }
            keep = "." + ext + keep
            rest = rest[..<dot]
        }
        var stem = String(rest)
        while !stem.isEmpty, stem.utf8.count + keep.utf8.count > maxNameBytes { stem.removeLast() }
        stem = stem.trimmingCharacters(in: .whitespaces)
        while stem.hasSuffix(".") { stem.removeLast() }
        return stem.isEmpty ? String(keep.dropFirst()) : stem + keep
    }

    /// The file name a `Content-Disposition` header suggests, unsanitised: RFC 6266, with
    /// `filename*` (RFC 8187) before `filename`; nil for a header that breaks its grammar.
    static func suggestedName(fromContentDisposition header: String) -> String? {
        ContentDisposition(parsing: header)?.suggestedName
    }
}
