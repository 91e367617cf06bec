import Foundation

/// Hides the secrets URLs carry wherever Haul shows or logs one: errors, task listings,
/// events, the API's answers and log lines. The store and ``ResumeData`` keep the real URL,
/// which the download needs.
///
/// - A password becomes `***` (`https://user:***@host/`); a user name without a password
///   becomes `***` too, since it is often a token (`https://***@host/`).
/// - The values of query parameters that name credentials or signatures (`token`,
///   `access_token`, `key`, `password`, `signature`, `X-Amz-Signature`, …) become `***`.
public enum Redaction {
    /// The URL as Haul may show it.
    public static func url(_ url: URL) -> String {
        text(url.absoluteString)
    }

    /// `text` with the secrets of every URL in it hidden; other text is unchanged.
    public static func text(_ text: String) -> String {
        // Bytes, not Foundation's search of a String: every task shown passes here.
        guard text.utf8.contains(where: { $0 == UInt8(ascii: "@") || $0 == UInt8(ascii: "=") }) else { return text }
        // A scheme, then everything up to the last `@` before the host ends: a password may
        // hold a raw `@` in text that is not (yet) a valid URL.
        var result = text.replacing(#/(?i)(\b[a-z][a-z0-9+.\-]*://)([^/?#\s]*)@/#) { match in
            let (_, scheme, userInfo) = match.output
            return "\(scheme)\(userInfo.contains(":") ? "\(userInfo.prefix { $0 != ":" }):***" : "***")@"
        }
        // A value ends at the next parameter, or before punctuation that ends the text around it.
        result = result.replacing(#/([?&;])([A-Za-z0-9_.\-]+)=[^&#;\s"']*?(?=[)\]>,.]*(?:[&#;\s"']|$))/#) { match in
            let (_, separator, name) = match.output
            guard secretParameters.contains(name.lowercased()) else { return String(match.output.0) }
            return "\(separator)\(name)=***"
        }
        return result
    }

    private static let secretParameters: Set<String> = [
        "token", "access_token", "refresh_token", "id_token", "auth", "authorization", "key", "api_key",
        "apikey", "password", "passwd", "pass", "pwd", "secret", "client_secret", "signature", "sig",
        "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature",
        "x-goog-credential",
    ]
}
