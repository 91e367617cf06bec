import Foundation

/// A `Content-Disposition` header read as RFC 6266 says, and the file name it suggests.
///
/// ```
/// content-disposition = disposition-type *( ";" disposition-parm )
/// disposition-parm    = filename-parm / disp-ext-parm
/// filename-parm       = "filename" "=" value / "filename*" "=" ext-value
/// value               = token / quoted-string
/// ```
///
/// A header that does not follow the grammar is ignored as a whole (RFC 6266, section 4.1;
/// the tc2231 cases): no disposition type or an empty one, a parameter without `=`, text
/// after a value (`"foo.html".txt`, `filename=foo bar`), an unterminated quoted string, a
/// parameter given twice, a token holding a character tokens cannot (`=?ISO-8859-1?Q?…?=`,
/// RFC 2047, is not decoded). A `filename*` whose value is not an RFC 8187 ext-value (quoted,
/// no charset, bad percent-encoding, a charset other than UTF-8 and ISO-8859-1, bytes that
/// are not that charset) is ignored by itself, and `filename` is used. One leniency, which
/// servers need: a `;` at the very end.
struct ContentDisposition: Equatable {
    /// The disposition type, lower-cased: `attachment`, `inline`, or an extension.
    var type: String
    /// `filename*`, decoded, when valid.
    var extendedName: String?
    /// `filename`, unquoted.
    var plainName: String?

    /// The name it suggests, unsanitised: `filename*` before `filename`. A plain name that
    /// held bytes that were not UTF-8 (seen here as U+FFFD: the HTTP parser decodes headers
    /// as UTF-8, so an ISO-8859-1 byte cannot be recovered) is not used.
    var suggestedName: String? {
        if let extendedName { return extendedName }
        guard let plainName, !plainName.unicodeScalars.contains("\u{FFFD}") else { return nil }
        return plainName
    }

    /// Parses `header`; nil when it does not follow RFC 6266's grammar.
    init?(parsing header: String) {
        var scanner = Scanner(Array(header.unicodeScalars))
        scanner.skipWhitespace()
        guard let type = scanner.token() else { return nil }
        self.type = type.lowercased()
        var seen: Set<String> = []
        while true {
            scanner.skipWhitespace()
            if scanner.atEnd { break }
            guard scanner.take(";") else { return nil }
            scanner.skipWhitespace()
            if scanner.atEnd { break }  // A trailing `;`.
            guard let name = scanner.token()?.lowercased() else { return nil }
            scanner.skipWhitespace()
            guard scanner.take("=") else { return nil }
            scanner.skipWhitespace()
            let value: String
            let quoted = scanner.peek == "\""
            if quoted {
                guard let text = scanner.quotedString() else { return nil }
                value = text
            } else {
                guard let text = scanner.token() else { return nil }
                value = text
            }
            guard seen.insert(name).inserted else { return nil }
            switch name {
            case "filename": plainName = value
            case "filename*": extendedName = quoted ? nil : Self.extendedValue(value)
            default: continue
            }
        }
    }

    /// RFC 8187's ext-value, `charset'[language]'value-chars`, decoded; nil when it is not one.
    static func extendedValue(_ text: String) -> String? {
        let parts = text.split(separator: "'", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count == 3 else { return nil }
        var bytes: [UInt8] = []
        var iterator = Array(parts[2].utf8).makeIterator()
        while let byte = iterator.next() {
            if byte == UInt8(ascii: "%") {
                guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                    return nil
                }
                bytes.append(high << 4 | low)
            } else {
                guard attributeCharacters.contains(byte) else { return nil }
                bytes.append(byte)
            }
        }
        switch parts[0].lowercased() {
        case "utf-8": return String(validating: bytes, as: UTF8.self)
        case "iso-8859-1": return String(String.UnicodeScalarView(bytes.map { Unicode.Scalar($0) }))
        default: return nil
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// RFC 8187's attr-char: letters, digits and ``!#$&+-.^_`|~``.
    private static let attributeCharacters = Set(
        "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$&+-.^_`|~".utf8
    )

    /// RFC 9110's tchar.
    static let tokenCharacters = Set(
        "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".unicodeScalars
    )

    /// Reads a header's scalars one construct at a time.
    private struct Scanner {
        let scalars: [Unicode.Scalar]
        var index = 0

        init(_ scalars: [Unicode.Scalar]) {
            self.scalars = scalars
        }

        var atEnd: Bool { index >= scalars.count }
        var peek: Unicode.Scalar? { atEnd ? nil : scalars[index] }

        mutating func skipWhitespace() {
            while let scalar = peek, scalar == " " || scalar == "\t" { index += 1 }
        }

        mutating func take(_ scalar: Unicode.Scalar) -> Bool {
            guard peek == scalar else { return false }
            index += 1
            return true
        }

        /// One or more token characters.
        mutating func token() -> String? {
            let start = index
            while let scalar = peek, ContentDisposition.tokenCharacters.contains(scalar) { index += 1 }
            guard index > start else { return nil }
            return String(String.UnicodeScalarView(scalars[start..<index]))
        }

        /// A quoted string, its escapes undone; nil when it does not end.
        mutating func quotedString() -> String? {
            guard take("\"") else { return nil }
            var result = String.UnicodeScalarView()
            while let scalar = peek {
                index += 1
                switch scalar {
                case "\"": return String(result)
                case "\\":
                    guard let escaped = peek else { return nil }
                    index += 1
                    result.append(escaped)
                default:
                    result.append(scalar)
                }
            }
            return nil
        }
    }
}
