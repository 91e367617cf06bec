import Foundation
import NIOHTTP1

/// What the server told us about the representation on the first response, kept so a
/// resume can prove it continues the same bytes (RFC 9110 §8.8, §13.1.5).
public struct Validators: Codable, Sendable, Equatable {
    /// The `ETag` exactly as sent, including quotes and any `W/` prefix.
    public var etag: String?
    /// The `Last-Modified` header as sent.
    public var lastModified: String?
    /// The `Date` header of the response that gave these validators.
    public var date: String?
    /// The full length of the representation, when known.
    public var totalLength: Int64?

    public init(etag: String? = nil, lastModified: String? = nil, date: String? = nil, totalLength: Int64? = nil) {
        self.etag = etag
        self.lastModified = lastModified
        self.date = date
        self.totalLength = totalLength
    }

    /// The ETag when it is strong; weak ETags must never be used in `If-Range`.
    var strongETag: String? {
        guard let etag, !etag.hasPrefix("W/"), etag.hasPrefix("\""), etag.hasSuffix("\""), etag.count >= 2 else {
            return nil
        }
        return etag
    }

    /// A Last-Modified date is strong when the response's Date is at least one second later
    /// (RFC 9110 §8.8.2.2): the file could not have changed twice within that second unnoticed.
    /// Both headers are rounded down to the second, so a gap of one in the headers can be a
    /// few milliseconds in truth (modified at 10.9 s, served at 11.2 s): Haul asks for two.
    /// (Apache, seeing such a date in `If-Range`, answers every range with the whole file.)
    var hasStrongLastModified: Bool {
        guard let lastModified, let date,
            let modified = HTTPDate.parse(lastModified),
            let served = HTTPDate.parse(date)
        else { return false }
        return served.timeIntervalSince(modified) >= 2
    }

    /// The value to send in `If-Range` on a resume: the strong ETag, else a strong
    /// Last-Modified, else nothing (then the overlap check guards the resume).
    var ifRangeValue: String? {
        if let strongETag { return strongETag }
        if etag == nil || etag?.hasPrefix("W/") == true, hasStrongLastModified { return lastModified }
        return nil
    }

    /// Why a response's validators prove it describes another representation than these,
    /// or nil when they do not.
    ///
    /// Any validator can prove a change, weak or strong (only `If-Range` needs a strong one):
    /// ETags are compared weakly (RFC 9110 §8.8.3.2: `W/"x"` and `"x"` are the same tag, so
    /// Apache's weak ETag of a just-modified file matches the strong one it sends a second
    /// later), Last-Modified dates by value. A validator the response leaves out proves nothing.
    func contradiction(_ headers: HTTPHeaders) -> String? {
        if let stored = etag, let received = headers.first(name: "ETag"),
            Validators.opaqueTag(stored) != Validators.opaqueTag(received)
        {
            return "the ETag changed from \(stored) to \(received)"
        }
        if let stored = lastModified, let received = headers.first(name: "Last-Modified") {
            let changed: Bool
            if let before = HTTPDate.parse(stored), let after = HTTPDate.parse(received) {
                changed = before != after
            } else {
                changed = stored.trimmingCharacters(in: .whitespaces) != received.trimmingCharacters(in: .whitespaces)
            }
            if changed { return "Last-Modified changed from \(stored) to \(received)" }
        }
        return nil
    }

    /// An ETag without its weakness indicator, for weak comparison.
    static func opaqueTag(_ etag: String) -> Substring {
        let trimmed = etag.trimmingCharacters(in: .whitespaces)
        return trimmed.hasPrefix("W/") ? trimmed.dropFirst(2) : Substring(trimmed)
    }

    /// Whether a resume can rely on `If-Range`; without it, the bytes before the resume point
    /// are read again and compared (rule 7), whatever weak validators say.
    var isStrong: Bool { ifRangeValue != nil }

    /// Reads the validators of a response.
    init(headers: HTTPHeaders, totalLength: Int64?) {
        self.etag = headers.first(name: "ETag")
        self.lastModified = headers.first(name: "Last-Modified")
        self.date = headers.first(name: "Date")
        self.totalLength = totalLength
    }
}

/// HTTP dates (RFC 9110 §5.6.7): IMF-fixdate, and the obsolete RFC 850 and asctime forms.
enum HTTPDate {
    private static let formats = [
        "EEE, dd MMM yyyy HH:mm:ss zzz",
        "EEEE, dd-MMM-yy HH:mm:ss zzz",
        "EEE MMM d HH:mm:ss yyyy",
    ]

    static func parse(_ text: String) -> Date? {
        for format in formats {
            let formatter = DateFormatter()
            formatter.locale = Locale(identifier: "en_US_POSIX")
            formatter.timeZone = TimeZone(identifier: "GMT")
            formatter.dateFormat = format
            if let date = formatter.date(from: text.trimmingCharacters(in: .whitespaces)) { return date }
        }
        return nil
    }

    static func format(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
