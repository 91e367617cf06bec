import Foundation
import GRDB
import Testing

@testable import Haul

#if canImport(Glibc)
import Glibc
#endif

@Suite("Store dates", .timeLimit(.minutes(1)))
struct StoreDateTests {
    @Test("GRDB's text format, written and read without ICU, to the millisecond")
    func storeDates() throws {
        let date = Date(timeIntervalSince1970: 1_795_000_000.125)
        #expect(StoreDate.text(date) == "2026-11-18 11:06:40.125")
        #expect(StoreDate.date("2026-11-18 11:06:40.125")?.timeIntervalSince1970 == 1_795_000_000.125)
        #expect(StoreDate.date("2026-11-18 11:06:40") == Date(timeIntervalSince1970: 1_795_000_000))
        #expect(StoreDate.date("2026-11-18") == Date(timeIntervalSince1970: 1_794_960_000))
        #expect(StoreDate.date("1969-12-31 23:59:59.500")?.timeIntervalSince1970 == -0.5)
        #expect(StoreDate.text(Date(timeIntervalSince1970: -0.5)) == "1969-12-31 23:59:59.500")
        #expect(StoreDate.date("yesterday") == nil)
        // What GRDB itself wrote before (its DateFormatter) reads back the same.
        let grdb = try #require(Date.fromDatabaseValue("2026-11-18 11:06:40.125".databaseValue))
        #expect(StoreDate.date("2026-11-18 11:06:40.125") == grdb)
    }

    @Test("the forms GRDB reads: a T before the time, no seconds, any fraction of a second")
    func forms() {
        let seconds = 1_795_000_000.0
        #expect(StoreDate.date("2026-11-18T11:06:40.125")?.timeIntervalSince1970 == seconds + 0.125)
        #expect(StoreDate.date("2026-11-18 11:06")?.timeIntervalSince1970 == seconds - 40)
        #expect(StoreDate.date("2026-11-18 11:06:40.5")?.timeIntervalSince1970 == seconds + 0.5)
        #expect(StoreDate.date("2026-11-18 11:06:40.123456789123")?.timeIntervalSince1970 == seconds + 0.123456789)
        // Leap days, a century that is not a leap year and one that is, before 1970 and after.
        #expect(StoreDate.date("2024-02-29")?.timeIntervalSince1970 == 1_709_164_800)
        #expect(StoreDate.date("2000-02-29")?.timeIntervalSince1970 == 951_782_400)
        #expect(StoreDate.date("1900-03-01")?.timeIntervalSince1970 == -2_203_891_200)
        #expect(StoreDate.date("1600-01-01")?.timeIntervalSince1970 == -11_676_096_000)
        // A day past its month's end counts on into the next, as timegm has it.
        #expect(StoreDate.date("2026-02-30") == StoreDate.date("2026-03-02"))
    }

    @Test(
        "anything else is not a date: a field out of range, a time zone, a stray byte, a truncation",
        arguments: [
            "", "2026", "2026-11", "2026-13-01", "2026-00-10", "2026-11-00", "2026-11-32", "2026-1-18",
            "2026-11-18 24:00", "2026-11-18 11:60", "2026-11-18 11:06:61", "2026-11-18 11:06:40.",
            "2026-11-18 11:06:40.125Z", "2026-11-18 11:06:40+00:00", "2026-11-18x", "2026-11-18 11",
            "2026-11-18  11:06", "２０２６-11-18", "-2026-11-18", "2026-11-18 11:06:40.12a", "1234567-01-01",
        ]
    )
    func notDates(text: String) {
        #expect(StoreDate.date(text) == nil)
    }

    @Test("text and back, against the C library's calendar, over dates from 1600 to 9999")
    func roundTrip() throws {
        var generator = SystemRandomNumberGenerator()
        let lowest: Int64 = -11_676_096_000_000  // 1600-01-01, in milliseconds
        let highest: Int64 = 253_402_300_799_999  // 9999-12-31 23:59:59.999
        var samples: [Int64] = [0, -1, lowest, highest, 951_782_400_000, 951_868_799_999]
        for _ in 0..<2000 { samples.append(Int64.random(in: lowest...highest, using: &generator)) }
        for sample in samples {
            let date = Date(timeIntervalSince1970: Double(sample) / 1000)
            // The millisecond the store writes: rounded down, as a Date is a binary fraction.
            let milliseconds = Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
            let text = StoreDate.text(date)
            #expect(text == Self.reference(milliseconds), "\(milliseconds)")
            let back = try #require(StoreDate.date(text), "\(text)")
            #expect(Int64((back.timeIntervalSince1970 * 1000).rounded()) == milliseconds, "\(text)")
        }
        // A year of five digits (a server's far future) is written whole and read back.
        let far = Date(timeIntervalSince1970: 400_000_000_000)
        #expect(StoreDate.text(far) == "14645-06-30 15:06:40.000")
        #expect(StoreDate.date("14645-06-30 15:06:40.000") == far)
        // Dates no Int64 of milliseconds holds are written, never a trap: the far future as a
        // date the store reads back, the far past as a year before 0 (which it refuses).
        for odd in [Date(timeIntervalSince1970: .infinity), Date(timeIntervalSince1970: 1e300), .distantFuture] {
            #expect(StoreDate.date(StoreDate.text(odd)) != nil, "\(StoreDate.text(odd))")
        }
        #expect(StoreDate.text(Date(timeIntervalSince1970: -1e300)).hasPrefix("-"))
        #expect(StoreDate.text(Date(timeIntervalSince1970: .nan)) == "1970-01-01 00:00:00.000")
    }

    /// The text by `gmtime_r`, as the store's dates were written before.
    private static func reference(_ milliseconds: Int64) -> String {
        var (seconds, millis) = milliseconds.quotientAndRemainder(dividingBy: 1000)
        if millis < 0 {
            millis += 1000
            seconds -= 1
        }
        var time = time_t(seconds)
        var parts = tm()
        gmtime_r(&time, &parts)
        func pad(_ value: Int, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(pad(Int(parts.tm_year) + 1900, 4))-\(pad(Int(parts.tm_mon) + 1, 2))-\(pad(Int(parts.tm_mday), 2)) "
            + "\(pad(Int(parts.tm_hour), 2)):\(pad(Int(parts.tm_min), 2)):\(pad(Int(parts.tm_sec), 2))."
            + pad(Int(millis), 3)
    }
}
