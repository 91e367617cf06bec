import Foundation
import HaulTestSupport
import HaulTesting
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

    @Test("a line past 1 MiB breaks the stream, the events before it kept; a line just under it is read")
    func overlongLine() throws {
        let limit = ServerSentEvents.Parser.maximumLine
        var parser = ServerSentEvents.Parser()
        let long = "event: completed\ndata: " + String(repeating: "x", count: limit - 100) + "\n\n"
        let fine = parser.feed(Array(long.utf8))
        #expect(fine.count == 1 && fine.first?.data.utf8.count == limit - 100 && !parser.isOverlong)

        // An endless line in 64 KiB reads, after an event in the same read as its start.
        var messages = parser.feed(Array((ServerSentEvents.format(logged(7)) + "data: ").utf8))
        let chunk = [UInt8](repeating: UInt8(ascii: "y"), count: 64 << 10)
        var reads = 0
        while !parser.isOverlong && reads < 100 {
            messages += parser.feed(chunk)
            reads += 1
        }
        #expect(parser.isOverlong)
        #expect(reads == 16, "broken once the line passed 1 MiB")
        #expect(try messages.map(StreamedEvent.init).map(\.eventID) == [7])
        // Nothing more is read from a broken stream.
        #expect(parser.feed(Array(ServerSentEvents.format(logged(8)).utf8)).isEmpty)

        // A whole line past the bound in one read, after an event in the same read.
        var whole = ServerSentEvents.Parser()
        let read = ServerSentEvents.format(logged(9)) + "data: " + String(repeating: "w", count: limit) + "\n\n"
        #expect(try whole.feed(Array(read.utf8)).map(StreamedEvent.init).map(\.eventID) == [9])
        #expect(whole.isOverlong)

        let error = StreamedEvent.overlong(from: "http://127.0.0.1:7800")
        #expect(error.message.hasPrefix("The event stream from http://127.0.0.1:7800 sent a line longer than 1 MiB"))
    }

    @Test("data lines adding up to more than 4 MiB without the blank line that ends an event break the stream")
    func overlongEvent() {
        var parser = ServerSentEvents.Parser()
        let line = Array(("data: " + String(repeating: "z", count: 512 << 10) + "\n").utf8)
        var reads = 0
        while !parser.isOverlong && reads < 100 {
            #expect(parser.feed(line).isEmpty)
            reads += 1
        }
        #expect(parser.isOverlong)
        #expect(reads == 9, "broken once the event's data passed 4 MiB")
    }

    @Test("a server that never ends a line: the client keeps the event before it, stops reading, and says why")
    func overlongStreamFromAServer() async throws {
        try await TestServer.withServer { server in
            // An event, then 96 MiB without a line break: more than the socket buffers on both
            // sides can hold (Linux lets loopback's grow to 32 MiB and 4 MiB).
            let wire = Array((ServerSentEvents.format(logged(7)) + "data: ").utf8)
            var resource = TestServer.Resource(size: wire.count + (96 << 20))
            resource.body = wire + [UInt8](repeating: UInt8(ascii: "x"), count: 96 << 20)
            resource.contentType = "text/event-stream"
            let path = API.prefix + "/events"
            server.set(path, resource)
            let client = HaulClient(host: "127.0.0.1", port: server.port, token: "t")
            var received: [EventRecord] = []
            let error = await #expect(throws: HaulError.self) {
                for try await event in client.liveEvents() { received.append(event) }
            }
            try await client.shutdown()
            #expect(received == [logged(7)])
            #expect(
                error?.message.hasPrefix(
                    "The event stream from http://127.0.0.1:\(server.port) sent a line longer than 1 MiB"
                ) == true,
                "\(String(describing: error))"
            )
            // The client closed the connection instead of reading on: the server could not
            // send the rest (it stops at a write the closed connection refuses). 4 to 10 MiB
            // go out here, what the buffers took; a client that read on took all 96.
            #expect(try await waitUntil { server.activeResponses == 0 })
            #expect(server.bodyBytesSent(path) < 48 << 20, "\(server.bodyBytesSent(path)) bytes sent")
        }
    }
}
