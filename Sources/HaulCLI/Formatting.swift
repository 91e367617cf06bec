import ArgumentParser
import Foundation

/// Human-readable sizes, speeds and durations for the terminal.
enum Format {
    /// `512 B`, `1.5 KiB`, `20.0 MiB`, `1.00 GiB`.
    static func bytes(_ count: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var value = Double(count)
        var unit = 0
        while value >= 1024, unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        if unit == 0 { return "\(count) B" }
        return fixed(value, decimals: value >= 100 ? 0 : value >= 10 ? 1 : 2) + " " + units[unit]
    }

    static func speed(_ bytesPerSecond: Double) -> String {
        bytes(Int64(bytesPerSecond)) + "/s"
    }

    /// `0:07`, `12:34`, `1:02:03`.
    static func duration(_ duration: Duration) -> String {
        let total = Int(duration.components.seconds)
        let (hours, minutes, seconds) = (total / 3600, total / 60 % 60, total % 60)
        let tail = twoDigits(seconds)
        return hours > 0 ? "\(hours):\(twoDigits(minutes)):\(tail)" : "\(minutes):\(tail)"
    }

    /// A wait: `0.4 s`, `4.2 s`, `25 s`, then as ``duration(_:)`` from two minutes on.
    static func wait(_ duration: Duration) -> String {
        let value = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        if value < 10 { return fixed(value, decimals: 1) + " s" }
        if value < 120 { return "\(Int(value.rounded())) s" }
        return Format.duration(duration)
    }

    /// Seconds with one decimal: `3.2 s`.
    static func seconds(_ duration: Duration) -> String {
        let value = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return fixed(value, decimals: 1) + " s"
    }

    /// `value` with `decimals` (0 to 3) digits after the point, rounded exactly as `printf`
    /// rounds (the binary value to the nearest, ties to even). Written out by hand: Foundation's
    /// `String(format:)` goes through NSString, a noticeable part of a short `haul get`'s start.
    static func fixed(_ value: Double, decimals: Int) -> String {
        let decimals = min(max(decimals, 0), 3)
        let magnitude = abs(value)
        guard magnitude.isFinite, magnitude < 1e15 else { return "\(value)" }
        let scale = [1, 10, 100, 1000][decimals] as UInt64
        // value × scale = significand × scale × 2^(exponent − 52), rounded in integers: no
        // error. Below 1e15 (< 2^50) the shift is at least 3; from 64 on the value is under a
        // half unit (the numerator is below 2^63), and subnormals too: 0.
        var units: UInt64 = 0
        // (Zero's exponent is Int.min: the shift is taken for normal values only.)
        if magnitude.isNormal, case let shift = 52 - Int(magnitude.exponent), shift < 64 {
            let numerator = (magnitude.significandBitPattern | 1 << 52) * scale
            units = numerator >> UInt64(shift)
            let rest = numerator & (1 << UInt64(shift) - 1)
            let half: UInt64 = 1 << UInt64(shift - 1)
            if rest > half || (rest == half && units & 1 == 1) { units += 1 }
        }
        var text = (value < 0 && units > 0 ? "-" : "") + "\(units / scale)"
        if decimals > 0 {
            let fraction = String(units % scale)
            text += "." + String(repeating: "0", count: decimals - fraction.count) + fraction
        }
        return text
    }

    /// `7` as `07`.
    private static func twoDigits(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
}

/// A byte count typed on the command line: `500K`, `10M`, `1.5G`, or plain bytes.
/// Suffixes are binary (K = 1024), as in curl, wget and aria2; a trailing `B` or `iB` is allowed.
struct ByteCount: ExpressibleByArgument, Equatable {
    var bytes: Int64

    init(bytes: Int64) { self.bytes = bytes }

    init?(argument: String) {
        var text = argument.trimmingCharacters(in: .whitespaces)
        for suffix in ["iB", "ib", "B", "b"] where text.hasSuffix(suffix) && text.count > suffix.count {
            text.removeLast(suffix.count)
            break
        }
        var multiplier: Double = 1
        if let last = text.last, let power = ["k": 1, "m": 2, "g": 3, "t": 4][last.lowercased()] {
            multiplier = pow(1024, Double(power))
            text.removeLast()
        }
        guard let value = Double(text), value.isFinite, value >= 0, value * multiplier < 9e18 else { return nil }
        bytes = Int64(value * multiplier)
    }

    static var defaultValueDescription: String { "a size such as 500K, 10M or 1G" }
}

/// A length of time typed on the command line: `90s`, `10m`, `24h`, `2d`, or plain seconds.
struct SpokenDuration: ExpressibleByArgument, Equatable {
    var seconds: Int64

    init(seconds: Int64) { self.seconds = seconds }

    init?(argument: String) {
        var text = argument.trimmingCharacters(in: .whitespaces).lowercased()
        var unit: Int64 = 1
        if let last = text.last, let scale = ["s": 1, "m": 60, "h": 3600, "d": 86400][String(last)] {
            unit = Int64(scale)
            text.removeLast()
        }
        guard let value = Int64(text), value > 0, value <= Int64.max / unit else { return nil }
        seconds = value * unit
    }

    /// `1d`, `24h` → `1d`; `5400` → `90m`: the largest unit that divides it.
    static func text(_ seconds: Int64) -> String {
        for (unit, name) in [(Int64(86400), "d"), (3600, "h"), (60, "m")] where seconds % unit == 0 {
            return "\(seconds / unit)\(name)"
        }
        return "\(seconds)s"
    }

    static var defaultValueDescription: String { "a duration such as 90s, 10m, 24h or 2d" }

    var defaultValueDescription: String { SpokenDuration.text(seconds) }
}

/// `yes` or `no` on the command line (also `on`/`off`, `true`/`false`, `1`/`0`).
struct YesNo: ExpressibleByArgument, Equatable {
    var value: Bool

    init?(argument: String) {
        switch argument.lowercased() {
        case "yes", "on", "true", "1": value = true
        case "no", "off", "false", "0": value = false
        default: return nil
        }
    }

    static var defaultValueDescription: String { "yes or no" }
}
