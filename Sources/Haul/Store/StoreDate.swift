import Foundation
import GRDB

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Dates as the store writes them: `yyyy-MM-dd HH:mm:ss.SSS` in UTC, the text GRDB reads back.
///
/// Formatted by hand rather than with GRDB's default `DateFormatter`, which loads ICU and
/// its data (about 6 MiB of resident memory) into every process that writes a task.
package enum StoreDate {
    package static func text(_ date: Date) -> String {
        let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
        var seconds = time_t(milliseconds.quotientAndRemainder(dividingBy: 1000).quotient)
        var millis = Int(milliseconds % 1000)
        if millis < 0 {
            millis += 1000
            seconds -= 1
        }
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(parts.tm_year + 1900, 4))-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2)) "
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2)).\(pad(Int32(millis), 3))"
    }

    /// Reads a stored date: the text above (seconds and milliseconds optional), or a number
    /// of seconds since 1970, as GRDB writes and reads them.
    package static func date(_ value: DatabaseValue) -> Date? {
        switch value.storage {
        case .double(let seconds): return Date(timeIntervalSince1970: seconds)
        case .int64(let seconds): return Date(timeIntervalSince1970: Double(seconds))
        case .string(let text): return date(text)
        default: return nil
        }
    }

    package static func date(_ text: String) -> Date? {
        // yyyy-MM-dd[ HH:mm[:ss[.SSS]]] (also with a T between date and time)
        let fields = text.split(whereSeparator: { "-: T.".contains($0) }).map { Int($0) }
        guard fields.count >= 3, fields.allSatisfy({ $0 != nil }) else { return nil }
        let values = fields.map { $0! }
        var parts = tm()
        parts.tm_year = Int32(values[0] - 1900)
        parts.tm_mon = Int32(values[1] - 1)
        parts.tm_mday = Int32(values[2])
        parts.tm_hour = Int32(values.count > 3 ? values[3] : 0)
        parts.tm_min = Int32(values.count > 4 ? values[4] : 0)
        parts.tm_sec = Int32(values.count > 5 ? values[5] : 0)
        let seconds = timegm(&parts)
        var fraction = 0.0
        if values.count > 6, let dot = text.lastIndex(of: ".") {
            fraction = Double("0" + text[dot...]) ?? 0
        }
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }

    /// Now, as stored text.
    package static var now: String { text(Date()) }
}
