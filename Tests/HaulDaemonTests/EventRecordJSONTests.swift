import Foundation
import HaulWire
import Testing

/// `EventRecord.jsonLine()` writes its JSON by hand: held here to what Foundation's
/// `JSONEncoder` (sorted keys, slashes unescaped, ISO 8601 dates) writes for the same record,
/// byte for byte, since clients and the daemon's log read both.
@Suite("Event JSON written by hand", .timeLimit(.minutes(1)))
struct EventRecordJSONTests {
    private static func foundation(_ record: EventRecord) throws -> String {
        String(decoding: try API.JSON.encoder().encode(record), as: UTF8.self)
    }

    /// Every field set, with text that needs escaping.
    private static func full(_ text: String, time: Date) -> EventRecord {
        var record = EventRecord(taskID: UUID(), kind: .completed, session: text, time: time)
        record.eventID = 42
        (record.url, record.state, record.from, record.to) = (text, .running, .queued, .waitingForNetwork)
        record.reason = .networkWaitExpired
        (record.received, record.thisRun, record.total) = (Int64.max, 0, -1)
        (record.bytesPerSecond, record.etaSeconds, record.offset) = (Int64.min, 7, 1 << 40)
        (record.path, record.bytes, record.fetched) = (text, 3, 4)
        (record.alreadyComplete, record.notModified, record.lengthConfirmed) = (true, false, true)
        (record.verifiedAgainst, record.error, record.code) = (text, text, "http-status")
        (record.status, record.resumable, record.hook) = (404, false, .error)
        (record.program, record.exitStatus, record.interface) = (text, Int32.min, "eth0")
        (record.address, record.connected, record.metered, record.allowMetered) = ("10.0.0.2", true, false, true)
        return record
    }

    @Test("every field, and text with every character JSON escapes, quotes, slashes and non-ASCII")
    func everyField() throws {
        var text = "a\"b\\c/d é 日本 🙂 \u{7F} \u{2028}"
        for scalar in 0..<0x20 { text.unicodeScalars.append(Unicode.Scalar(UInt8(scalar))) }
        let record = Self.full(text, time: Date(timeIntervalSince1970: 1_795_000_000.999))
        #expect(record.jsonLine() == (try Self.foundation(record)))
        #expect(try EventRecord(jsonLine: record.jsonLine()).path == text)
    }

    @Test("each kind with only its own fields, and no time")
    func sparse() throws {
        for kind in [EventRecord.Kind.added, .state, .progress, .resumed, .completed, .failed, .network, .hook] {
            let record = EventRecord(taskID: kind == .network ? nil : UUID(), kind: kind, time: nil)
            #expect(record.jsonLine() == (try Self.foundation(record)))
        }
    }

    @Test("times to the second, before 1970 and after, and the edges of what is written by hand")
    func times() throws {
        var generator = SystemRandomNumberGenerator()
        var seconds: [Double] = [0, -0.5, -1, 0.999_999, 951_782_400, -12_212_553_600, 253_402_300_799.9]
        for _ in 0..<500 { seconds.append(Double.random(in: -2_000_000_000...4_000_000_000, using: &generator)) }
        for value in seconds {
            let record = EventRecord(taskID: nil, kind: .network, time: Date(timeIntervalSince1970: value))
            #expect(record.jsonLine() == (try Self.foundation(record)), "\(value)")
        }
        // Outside the years written by hand (1583 to 9999), Foundation writes it.
        for value in [1e12, 253_402_300_800, -12_212_553_600.5, -62_135_596_800] {
            let far = EventRecord(taskID: nil, kind: .network, time: Date(timeIntervalSince1970: value))
            #expect(far.jsonLine() == (try Self.foundation(far)), "\(value)")
        }
    }
}
