import Foundation
import HaulTestSupport
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul
@testable import HaulClient
@testable import HaulDaemon

/// The event stream's wire format, as the daemon writes it and the client reads it.
@Suite(.timeLimit(.minutes(10))) struct ServerSentEventsTests {
    private let taskID = UUID(uuidString: "6F1C9B0E-2D4A-4E55-9D0B-7A51C2F0A001")!

    private func logged(_ id: Int64) -> EventRecord {
        var record = EventRecord(
            taskID: taskID,
            kind: .completed,
            session: "s",
            time: Date(timeIntervalSince1970: 1_790_000_000)
        )
        record.eventID = id
        record.path = "/data/a b\u{1F600}.bin"
        record.bytes = 42
        return record
    }

    @Test func messagesSplitAcrossChunksAreReadWhole() throws {
        let progress = EventRecord(taskID: taskID, kind: .progress, session: "s")
        let wire =
            ServerSentEvents.heartbeat + ServerSentEvents.format(logged(7)) + ServerSentEvents.format(progress)
            + ServerSentEvents.format(logged(8))
        let bytes = Array(wire.utf8)
        // Every split point, including inside a multi-byte character.
        for split in 0...bytes.count {
            var parser = ServerSentEvents.Parser()
            let messages = parser.feed(bytes[..<split]) + parser.feed(bytes[split...])
            let events = try messages.map(StreamedEvent.init)
            #expect(events.map(\.eventID) == [7, nil, 8], "split at \(split)")
            #expect(events.map(\.kind) == [.completed, .progress, .completed])
            #expect(events[0].json == logged(7).jsonLine())
            #expect(try events[2].record() == logged(8))
        }
    }

    @Test func aDataLineThatIsNotAnEventIsAnErrorThatSaysSo() throws {
        var parser = ServerSentEvents.Parser()
        let messages = parser.feed(Array("id: 3\nevent: completed\ndata: {\"nope\": 1}\n\n".utf8))
        let event = try StreamedEvent(messages[0])
        let error = #expect(throws: HaulError.self) { try event.record() }
        #expect(error?.message.hasPrefix("The daemon sent an event that could not be read") == true)

        let badID = parser.feed(Array("id: x1\nevent: completed\ndata: {}\n\n".utf8))
        #expect(throws: HaulError.self) { try StreamedEvent(badID[0]) }
    }

    @Test("a read's events are handed on together, those before one that cannot be read kept, then its error")
    func eventsOfOneRead() throws {
        var parser = ServerSentEvents.Parser()
        let wire =
            ServerSentEvents.format(logged(7)) + "id: x1\nevent: completed\ndata: {}\n\n"
            + ServerSentEvents.format(logged(8))
        let (events, failure) = StreamedEvent.events(parser.feed(Array(wire.utf8)))
        #expect(events.map(\.eventID) == [7])
        #expect((failure as? HaulError)?.message.contains("'x1'") == true, "\(String(describing: failure))")
        let whole = StreamedEvent.events(
            parser.feed(Array((ServerSentEvents.format(logged(9)) + ServerSentEvents.format(logged(10))).utf8))
        )
        #expect(whole.events.map(\.eventID) == [9, 10] && whole.failure == nil)
    }
}
