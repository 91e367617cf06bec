import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

extension EventRecord {
    /// One line of JSON (keys sorted, ISO 8601 time), without the newline: byte for byte what
    /// `API.JSON.encoder()` writes (`EventRecordJSONTests` holds it to that), written directly.
    /// The daemon writes one for every event it logs and every follower it sends one to, and
    /// `JSONEncoder` took a seventh of its CPU for a burst of small downloads.
    public func jsonLine() -> String {
        // A time outside the years 1583 to 9999 (none Haul makes): as Foundation writes it,
        // which counts days before the Gregorian calendar's start by the Julian one.
        if let time, !(-12_212_553_600..<253_402_300_800).contains(time.timeIntervalSince1970) {
            return String(decoding: (try? API.JSON.encoder().encode(self)) ?? Data(), as: UTF8.self)
        }
        var line = JSONLine()
        // In the order of `.sortedKeys`.
        line.field("address", address)
        line.field("allowMetered", allowMetered)
        line.field("alreadyComplete", alreadyComplete)
        line.field("bytes", bytes)
        line.field("bytesPerSecond", bytesPerSecond)
        line.field("code", code)
        line.field("connected", connected)
        line.field("error", error)
        line.field("etaSeconds", etaSeconds)
        line.field("event", kind.rawValue)
        line.field("eventID", eventID)
        line.field("exitStatus", exitStatus.map(Int64.init))
        line.field("fetched", fetched)
        line.field("from", from?.rawValue)
        line.field("hook", hook?.rawValue)
        line.field("id", taskID?.uuidString)
        line.field("interface", interface)
        line.field("lengthConfirmed", lengthConfirmed)
        line.field("metered", metered)
        line.field("notModified", notModified)
        line.field("offset", offset)
        line.field("path", path)
        line.field("program", program)
        line.field("reason", reason?.rawValue)
        line.field("received", received)
        line.field("resumable", resumable)
        line.field("session", session)
        line.field("state", state?.rawValue)
        line.field("status", status.map(Int64.init))
        line.field("thisRun", thisRun)
        line.field("time", time: time)
        line.field("to", to?.rawValue)
        line.field("total", total)
        line.field("url", url)
        line.field("verifiedAgainst", verifiedAgainst)
        return line.finish()
    }

}

/// A JSON object written field by field, as `JSONEncoder` writes one without slashes escaped.
private struct JSONLine {
    private var bytes: [UInt8] = [UInt8(ascii: "{")]

    mutating func field(_ key: String, _ value: String?) {
        guard let value else { return }
        name(key)
        string(value)
    }

    mutating func field(_ key: String, _ value: Int64?) {
        guard let value else { return }
        name(key)
        bytes.append(contentsOf: String(value).utf8)
    }

    mutating func field(_ key: String, _ value: Bool?) {
        guard let value else { return }
        name(key)
        bytes.append(contentsOf: (value ? "true" : "false").utf8)
    }

    mutating func finish() -> String {
        bytes.append(UInt8(ascii: "}"))
        return String(decoding: bytes, as: UTF8.self)
    }

    private mutating func name(_ key: String) {
        if bytes.count > 1 { bytes.append(UInt8(ascii: ",")) }
        string(key)
        bytes.append(UInt8(ascii: ":"))
    }

    mutating func field(_ key: String, time: Date?) {
        guard let time else { return }
        name(key)
        bytes.append(UInt8(ascii: "\""))
        JSONLine.appendInternetTime(time, to: &bytes)
        bytes.append(UInt8(ascii: "\""))
    }

    private mutating func string(_ text: String) {
        bytes.append(UInt8(ascii: "\""))
        // Most text needs no escape: copied whole.
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == UInt8(ascii: "\"") || $0 == UInt8(ascii: "\\") }) {
            bytes.append(contentsOf: text.utf8)
            bytes.append(UInt8(ascii: "\""))
            return
        }
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): bytes.append(contentsOf: #"\""#.utf8)
            case UInt8(ascii: "\\"): bytes.append(contentsOf: #"\\"#.utf8)
            case 0x08: bytes.append(contentsOf: #"\b"#.utf8)
            case 0x0C: bytes.append(contentsOf: #"\f"#.utf8)
            case 0x0A: bytes.append(contentsOf: #"\n"#.utf8)
            case 0x0D: bytes.append(contentsOf: #"\r"#.utf8)
            case 0x09: bytes.append(contentsOf: #"\t"#.utf8)
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                bytes.append(contentsOf: #"\u00"#.utf8)
                bytes.append(hex[Int(byte >> 4)])
                bytes.append(hex[Int(byte & 0xF)])
            default: bytes.append(byte)
            }
        }
        bytes.append(UInt8(ascii: "\""))
    }

    /// `yyyy-MM-ddTHH:mm:ssZ` in UTC, the second rounded down, as the `.iso8601` strategy
    /// writes a date (for the years 1583 to 9999 `jsonLine` writes itself).
    static func appendInternetTime(_ date: Date, to bytes: inout [UInt8]) {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func append(_ value: Int32, digits: Int32, then separator: Unicode.Scalar) {
            var divisor: Int32 = 1
            for _ in 1..<digits { divisor *= 10 }
            while divisor > 0 {
                bytes.append(UInt8(ascii: "0") + UInt8(value / divisor % 10))
                divisor /= 10
            }
            bytes.append(UInt8(ascii: separator))
        }
        append(parts.tm_year + 1900, digits: 4, then: "-")
        append(parts.tm_mon + 1, digits: 2, then: "-")
        append(parts.tm_mday, digits: 2, then: "T")
        append(parts.tm_hour, digits: 2, then: ":")
        append(parts.tm_min, digits: 2, then: ":")
        append(parts.tm_sec, digits: 2, then: "Z")
    }
}
