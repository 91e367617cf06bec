import Foundation
import GRDB

/// Dates as the store writes them: `yyyy-MM-dd HH:mm:ss.SSS` in UTC, the text GRDB reads back.
///
/// Formatted and parsed by hand rather than with GRDB's default `DateFormatter`, which loads
/// ICU and its data (about 6 MiB of resident memory) into every process that writes a task;
/// and with the calendar's arithmetic rather than `timegm` and `split`, since every task read
/// from the store has three dates (40,000 instructions each before, a task listed or re-added
/// read two tasks).
package enum StoreDate {
    package static func text(_ date: Date) -> String {
        // Never a trap: a date no Int64 of milliseconds holds (infinite, not a number, or
        // beyond 290,000 years) is written as the nearest one that does.
        let scaled = (date.timeIntervalSince1970 * 1000).rounded(.down)
        let milliseconds = scaled.isNaN ? 0 : Int64(max(min(scaled, 9e15), -9e15))
        let (days, inDay) = floorDivision(milliseconds, 86_400_000)
        let (year, month, day) = civil(days: days)
        guard (0...9999).contains(year) else { return slowText(year, month, day, inDay) }
        // Written straight into the text's storage: a task's write has three dates, an event one.
        return String(unsafeUninitializedCapacity: 23) { buffer in
            var count = 0
            func append(_ value: Int64, digits: Int, then separator: Unicode.Scalar?) {
                var divisor: Int64 = 1
                for _ in 1..<digits { divisor *= 10 }
                while divisor > 0 {
                    buffer[count] = UInt8(ascii: "0") + UInt8(value / divisor % 10)
                    count += 1
                    divisor /= 10
                }
                if let separator {
                    buffer[count] = UInt8(ascii: separator)
                    count += 1
                }
            }
            append(year, digits: 4, then: "-")
            append(month, digits: 2, then: "-")
            append(day, digits: 2, then: " ")
            append(inDay / 3_600_000, digits: 2, then: ":")
            append(inDay / 60_000 % 60, digits: 2, then: ":")
            append(inDay / 1000 % 60, digits: 2, then: ".")
            append(inDay % 1000, digits: 3, then: nil)
            return count
        }
    }

    /// A year outside 0–9999 (a date from a server's far past or future): the same fields,
    /// the year as many digits as it has.
    private static func slowText(_ year: Int64, _ month: Int64, _ day: Int64, _ inDay: Int64) -> String {
        func pad(_ value: Int64, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(year, 4))-\(pad(month, 2))-\(pad(day, 2)) \(pad(inDay / 3_600_000, 2)):"
            + "\(pad(inDay / 60_000 % 60, 2)):\(pad(inDay / 1000 % 60, 2)).\(pad(inDay % 1000, 3))"
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

    /// `yyyy-MM-dd`, then optionally ` HH:mm` (or `THH:mm`), `:ss` and `.` with a fraction of a
    /// second; nil for anything else, a month or a time of day out of range included.
    package static func date(_ text: String) -> Date? {
        var reader = DigitReader(Array(text.utf8))
        guard let year = reader.number(digits: 1...6), reader.skip("-"),
            let month = reader.number(digits: 2...2), reader.skip("-"),
            let day = reader.number(digits: 2...2), (1...12).contains(month), (1...31).contains(day)
        else { return nil }
        var seconds = civilDays(year: year, month: month, day: day) * 86_400
        var fraction = 0.0
        if !reader.atEnd {
            guard reader.skip(" ") || reader.skip("T"), let hour = reader.number(digits: 2...2), reader.skip(":"),
                let minute = reader.number(digits: 2...2), hour < 24, minute < 60
            else { return nil }
            seconds += hour * 3600 + minute * 60
            if reader.skip(":") {
                guard let second = reader.number(digits: 2...2), second <= 60 else { return nil }
                seconds += second
                if reader.skip(".") {
                    let start = reader.position
                    guard let digits = reader.number(digits: 1...9) else { return nil }
                    var scale = 1.0
                    for _ in start..<reader.position { scale *= 10 }
                    fraction = Double(digits) / scale
                    // Finer than a nanosecond: read, and dropped.
                    while reader.number(digits: 1...9) != nil {}
                }
            }
            guard reader.atEnd else { return nil }
        }
        return Date(timeIntervalSince1970: Double(seconds) + fraction)
    }

    /// Now, as stored text.
    package static var now: String { text(Date()) }

    /// The quotient rounded down and the remainder that goes with it (never negative).
    static func floorDivision(_ value: Int64, _ divisor: Int64) -> (Int64, Int64) {
        let (quotient, remainder) = value.quotientAndRemainder(dividingBy: divisor)
        return remainder < 0 ? (quotient - 1, remainder + divisor) : (quotient, remainder)
    }

    /// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
    static func civil(days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let shifted = days + 719_468
        let era = floorDivision(shifted, 146_097).0
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let shiftedMonth = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * shiftedMonth + 2) / 5 + 1
        let month = shiftedMonth < 10 ? shiftedMonth + 3 : shiftedMonth - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// The days from 1970-01-01 to a proleptic Gregorian date (`days_from_civil`); a day past
    /// its month's end counts on into the next, as `timegm` has it.
    static func civilDays(year: Int64, month: Int64, day: Int64) -> Int64 {
        let year = month <= 2 ? year - 1 : year
        let era = floorDivision(year, 400).0
        let yearOfEra = year - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// Reads ASCII digits and separators from the front of a date's bytes.
    private struct DigitReader {
        let bytes: [UInt8]
        var position = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }

        var atEnd: Bool { position == bytes.count }

        mutating func skip(_ separator: Unicode.Scalar) -> Bool {
            guard position < bytes.count, bytes[position] == UInt8(ascii: separator) else { return false }
            position += 1
            return true
        }

        /// A run of digits whose length is in `digits`, or nil (nothing consumed).
        mutating func number(digits: ClosedRange<Int>) -> Int64? {
            var end = position
            var value: Int64 = 0
            while end < bytes.count, end - position < digits.upperBound, (48...57).contains(bytes[end]) {
                value = value * 10 + Int64(bytes[end] - 48)
                end += 1
            }
            guard digits.contains(end - position) else { return nil }
            position = end
            return value
        }
    }
}
