import Foundation

/// Hides the secrets URLs carry wherever Haul shows or logs one: errors, task listings,
/// events, the API's answers and log lines. The store and ``ResumeData`` keep the real URL,
/// which the download needs.
///
/// - A password becomes `***` (`https://user:***@host/`); a user name without a password
///   becomes `***` too, since it is often a token (`https://***@host/`).
/// - The values of query parameters that name credentials or signatures (`token`,
///   `access_token`, `key`, `password`, `signature`, `X-Amz-Signature`, …) become `***`.
///
/// The text is scanned once per rule, by Unicode scalar: every task a listing, an event or a
/// finished download shows passes here, and a regular expression literal is parsed and compiled
/// again each time it is evaluated (with query strings in the URLs, that was nearly half of a
/// busy daemon's CPU).
public enum Redaction {
    /// The URL as Haul may show it.
    public static func url(_ url: URL) -> String {
        text(url.absoluteString)
    }

    /// `text` with the secrets of every URL in it hidden; other text is unchanged.
    public static func text(_ text: String) -> String {
        // Bytes, not Foundation's search of a String: every task shown passes here.
        guard text.utf8.contains(where: { $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "=") }) else { return text }
        let scalars = Array(text.unicodeScalars)
        var hidden = hidingUserInfo(scalars)
        hidden = hidingParameters(hidden)
        guard hidden != scalars else { return text }
        var result = String.UnicodeScalarView()
        result.append(contentsOf: hidden)
        return String(result)
    }

    /// Each `scheme://userinfo@`: the user information (everything up to the last `@` before the
    /// authority ends, since a password may hold a raw `@` in text that is not yet a valid URL)
    /// becomes `name:***` when it has a password, `***` when it has not. A scheme is a letter and
    /// then letters, digits, `+`, `.` or `-`, in any case; a scheme glued to a word before it
    /// (`1http://`, `a:http://`) counts from its first letter.
    static func hidingUserInfo(_ text: [Unicode.Scalar]) -> [Unicode.Scalar] {
        var result: [Unicode.Scalar] = []
        var copied = 0
        var index = 0
        while index + 2 < text.count {
            guard text[index] == ":", text[index + 1] == "/", text[index + 2] == "/" else {
                index += 1
                continue
            }
            let userStart = index + 3
            var schemeStart = index
            while schemeStart > copied, isSchemeCharacter(text[schemeStart - 1]) { schemeStart -= 1 }
            while schemeStart < index, !isLetter(text[schemeStart]) { schemeStart += 1 }
            var end = userStart
            var lastAt: Int?
            while end < text.count, !endsAuthority(text[end]) {
                if text[end] == "@" { lastAt = end }
                end += 1
            }
            guard schemeStart < index, let at = lastAt else {
                index = userStart
                continue
            }
            if result.isEmpty { result.reserveCapacity(text.count) }
            result += text[copied..<userStart]
            if let colon = text[userStart..<at].firstIndex(of: ":") {
                result += text[userStart..<colon]
                result += [":", "*", "*", "*"]
            } else {
                result += ["*", "*", "*"]
            }
            result.append("@")
            copied = at + 1
            index = copied
        }
        guard copied > 0 else { return text }
        result += text[copied...]
        return result
    }

    /// Each `?name=value`, `&name=value` or `;name=value` whose name is a secret's: the value
    /// becomes `***`. A value ends at `&`, `#`, `;`, a quote, white space or the end, less the
    /// `)`, `]`, `>`, `,` and `.` just before that end, which end the text around it. A name is
    /// letters, digits, `_`, `.` and `-`.
    static func hidingParameters(_ text: [Unicode.Scalar]) -> [Unicode.Scalar] {
        var result: [Unicode.Scalar] = []
        var copied = 0
        var index = 0
        while index < text.count {
            guard text[index] == "?" || text[index] == "&" || text[index] == ";" else {
                index += 1
                continue
            }
            var nameEnd = index + 1
            while nameEnd < text.count, isNameCharacter(text[nameEnd]) { nameEnd += 1 }
            guard nameEnd > index + 1, nameEnd < text.count, text[nameEnd] == "=" else {
                index += 1
                continue
            }
            let valueStart = nameEnd + 1
            var valueEnd = valueStart
            while valueEnd < text.count, !endsValue(text[valueEnd]) { valueEnd += 1 }
            while valueEnd > valueStart, closesText(text[valueEnd - 1]) { valueEnd -= 1 }
            let name = String(String.UnicodeScalarView(text[(index + 1)..<nameEnd])).lowercased()
            if secretParameters.contains(name) {
                if result.isEmpty { result.reserveCapacity(text.count) }
                result += text[copied..<valueStart]
                result += ["*", "*", "*"]
                copied = valueEnd
            }
            index = valueEnd
        }
        guard copied > 0 else { return text }
        result += text[copied...]
        return result
    }

    private static func isLetter(_ scalar: Unicode.Scalar) -> Bool {
        ("a"..."z").contains(scalar) || ("A"..."Z").contains(scalar)
    }

    private static func isSchemeCharacter(_ scalar: Unicode.Scalar) -> Bool {
        isLetter(scalar) || ("0"..."9").contains(scalar) || scalar == "+" || scalar == "." || scalar == "-"
    }

    private static func isNameCharacter(_ scalar: Unicode.Scalar) -> Bool {
        isLetter(scalar) || ("0"..."9").contains(scalar) || scalar == "_" || scalar == "." || scalar == "-"
    }

    private static func endsAuthority(_ scalar: Unicode.Scalar) -> Bool {
        scalar == "/" || scalar == "?" || scalar == "#" || scalar.properties.isWhitespace
    }

    private static func endsValue(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case "&", "#", ";", "\"", "'": true
        default: scalar.properties.isWhitespace
        }
    }

    private static func closesText(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar {
        case ")", "]", ">", ",", ".": true
        default: false
        }
    }

    static let secretParameters: Set<String> = [
        "token", "access_token", "refresh_token", "id_token", "auth", "authorization", "key", "api_key",
        "apikey", "password", "passwd", "pass", "pwd", "secret", "client_secret", "signature", "sig",
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature",
        "x-goog-credential",
    ]
}
