import Foundation
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

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
///
/// Read and written by hand, like ``StoreDate``: `DateFormatter` would load ICU and its data
/// into every process that reads a `Last-Modified` or a `Retry-After`.
enum HTTPDate {
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
    private static let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
    private static let longDays = ["Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday"]

    /// `Sun, 06 Nov 1994 08:49:37 GMT`, `Sunday, 06-Nov-94 08:49:37 GMT` or
    /// `Sun Nov  6 08:49:37 1994`; nil for anything else, including impossible dates.
    static func parse(_ text: String) -> Date? {
        let fields = text.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "-" || $0 == ":" }).map(String.init)
        guard fields.count == 7 || fields.count == 8 else { return nil }
        let day: Int
        let month: Int
        let year: Int
        let clock: ArraySlice<String>
        if fields.count == 7 {
            // asctime: weekday month day hh mm ss year
            guard days.contains(fields[0]), let m = months.firstIndex(of: fields[1]),
                let d = number(fields[2], digits: 1...2), let y = number(fields[6], digits: 4...4)
            else { return nil }
            (day, month, year, clock) = (d, m, y, fields[3...5])
        } else {
            // IMF-fixdate or RFC 850: weekday day month year hh mm ss GMT
            guard days.contains(fields[0]) || longDays.contains(fields[0]), ["GMT", "UTC", "UT"].contains(fields[7]),
                let d = number(fields[1], digits: 2...2), let m = months.firstIndex(of: fields[2]),
                let y = number(fields[3], digits: 2...4), fields[3].count != 3
            else { return nil }
            (day, month, year, clock) = (d, m, fields[3].count == 2 ? fullYear(y) : y, fields[4...6])
        }
        let times = clock.map { number($0, digits: 2...2) }
        guard let hour = times[0], let minute = times[1], let second = times[2],
            hour < 24, minute < 60, second < 61, (1...31).contains(day), year >= 1900
        else { return nil }
        // By hand, not `timegm`: glibc reads /etc/localtime the first time it converts any
        // time, on the way to a download's end. 31 Feb counts on into March: not a date.
        let dayCount = StoreDate.civilDays(year: Int64(year), month: Int64(month + 1), day: Int64(day))
        guard StoreDate.civil(days: dayCount) == (Int64(year), Int64(month + 1), Int64(day)) else { return nil }
        let seconds = dayCount * 86_400 + Int64(hour * 3600 + minute * 60 + second)
        return Date(timeIntervalSince1970: TimeInterval(seconds))
    }

    /// The IMF-fixdate of `date`, e.g. `Sun, 06 Nov 1994 08:49:37 GMT`.
    static func format(_ date: Date) -> String {
        let seconds = Int64(date.timeIntervalSince1970.rounded(.down))
        let (day, second) = StoreDate.floorDivision(seconds, 86_400)
        let (year, month, dayOfMonth) = StoreDate.civil(days: day)
        // 1970-01-01 was a Thursday.
        let weekday = Int(((day % 7) + 11) % 7)
        func two(_ value: Int64) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return
            "\(days[weekday]), \(two(dayOfMonth)) \(months[Int(month - 1)]) \(year) "
            + "\(two(second / 3600)):\(two(second / 60 % 60)):\(two(second % 60)) GMT"
    }

    /// A whole number of `digits` ASCII digits.
    private static func number(_ text: String, digits: ClosedRange<Int>) -> Int? {
        guard digits.contains(text.utf8.count), text.utf8.allSatisfy({ (48...57).contains($0) }) else { return nil }
        return Int(text)
    }

    /// An RFC 850 two-digit year: the most recent year with those digits not more than 50
    /// years in the future (RFC 9110 §5.6.7).
    private static func fullYear(_ twoDigits: Int) -> Int {
        var now = time_t(Date().timeIntervalSince1970)
        var parts = tm()
        gmtime_r(&now, &parts)
        let current = Int(parts.tm_year) + 1900
        var year = current - current % 100 + twoDigits
        if year > current + 50 { year -= 100 }
        return year
    }
}
