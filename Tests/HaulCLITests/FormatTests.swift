import Foundation
import Testing

@testable import HaulCLI

/// The terminal's numbers, written by hand instead of through `String(format:)`: the same text
/// `printf` would print, rounding included.
@Suite("Sizes, percentages and durations as the terminal shows them")
struct FormatTests {
    @Test("fixed decimals match printf's, ties to even included, for 0 to 3 decimals")
    func fixedMatchesPrintf() {
        let values: [Double] = [
            0, 0.004, 0.005, 0.0051, 0.125, 0.375, 0.5, 1.5, 2.5, 2.675, 9.995, 9.999, 10, 99.95, 99.96,
            100, 123.456, 1023.999, 4_194_303.99, 1e12 + 0.5, 0.0005, 0.0015, 1e-300,
            .leastNonzeroMagnitude, 9.999_999_999_999e14,
        ]
        for value in values {
            for decimals in 0...3 {
                let printf = String(format: "%.\(decimals)f", value)
                #expect(Format.fixed(value, decimals: decimals) == printf, "\(value), \(decimals) decimals")
            }
        }
        #expect(Format.fixed(-1.25, decimals: 1) == String(format: "%.1f", -1.25))
        #expect(Format.fixed(-0.01, decimals: 1) == "0.0")
    }

    @Test("sizes, durations and waits read as before")
    func sizesAndDurations() {
        #expect(Format.bytes(512) == "512 B")
        #expect(Format.bytes(1536) == "1.50 KiB")
        #expect(Format.bytes(20 << 20) == "20.0 MiB")
        #expect(Format.bytes(150 << 20) == "150 MiB")
        #expect(Format.bytes(1 << 30) == "1.00 GiB")
        #expect(Format.bytes((1 << 30) - 1) == "1024 MiB")
        #expect(Format.speed(2.5 * 1024 * 1024) == "2.50 MiB/s")
        #expect(Format.duration(.seconds(7)) == "0:07")
        #expect(Format.duration(.seconds(754)) == "12:34")
        #expect(Format.duration(.seconds(3723)) == "1:02:03")
        #expect(Format.wait(.milliseconds(420)) == "0.4 s")
        #expect(Format.wait(.milliseconds(4250)) == "4.2 s")
        #expect(Format.wait(.seconds(25)) == "25 s")
        #expect(Format.wait(.seconds(130)) == "2:10")
        #expect(Format.seconds(.milliseconds(3249)) == "3.2 s")
    }
}
