import AsyncHTTPClient
import Foundation
import Haul
import HaulWire
import HaulWireMapping
import NIOCore
import NIOFoundationCompat
import NIOHTTP1

/// One event as the daemon sent it: its id, kind and JSON line, not yet decoded.
///
/// A client that passes events on as JSON (`haul events --json`) prints ``json`` as it
/// is; one that reads them calls ``record()``.
public struct StreamedEvent: Sendable {
    /// The event's place in its session's log; nil for progress.
    public let eventID: Int64?
    public let kind: EventRecord.Kind
    /// The event as one line of JSON, exactly as ``EventRecord/jsonLine()`` writes it.
    public let json: String

    /// The events of one network read, handed on together: in order, up to one that cannot
    /// be read, and that one's error.
    static func events(_ messages: [ServerSentEvents.Message]) -> (events: [StreamedEvent], failure: (any Error)?) {
        var events: [StreamedEvent] = []
        events.reserveCapacity(messages.count)
        for message in messages {
            do { events.append(try StreamedEvent(message)) } catch { return (events, error) }
        }
        return (events, nil)
    }

    init(_ message: ServerSentEvents.Message) throws {
        // Bytes, not Foundation's search of a String: 50 followers of 10,000 downloads pass
        // here 2 million times.
        guard let kind = message.event.flatMap(EventRecord.Kind.init(rawValue:)),
            !Self.hasLineBreak(message.data)
        else {
            // Not what the daemon writes: decoding says what is wrong with it.
            self.init(try StreamedEvent.decode(message.data))
            return
        }
        var eventID: Int64?
        if let id = message.id {
            guard let number = Int64(id) else {
                throw HaulError(.invalidResponse, "The daemon sent an event whose id '\(id)' is not a number")
            }
            eventID = number
        }
        self.init(eventID: eventID, kind: kind, json: message.data)
    }

    /// The error for an event stream with a line or an event past the parser's bounds: not
    /// the stream a Haul daemon sends.
    static func overlong(from base: String) -> HaulError {
        HaulError(
            .invalidResponse,
            "The event stream from \(base.removingPercentEncoding ?? base) sent a line longer than "
                + "\(ServerSentEvents.Parser.maximumLine >> 20) MiB or an event larger than "
                + "\(ServerSentEvents.Parser.maximumData >> 20) MiB; a Haul daemon's events are a few hundred bytes",
            hint: "Check that the address is a Haul daemon's"
        )
    }

    /// Whether `text` holds a line break, read over its bytes in place.
    private static func hasLineBreak(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { $0.contains(UInt8(ascii: "\n")) }
    }

    private init(eventID: Int64?, kind: EventRecord.Kind, json: String) {
        self.eventID = eventID
        self.kind = kind
        self.json = json
    }

    init(_ record: EventRecord) {
        self.init(eventID: record.eventID, kind: record.kind, json: record.jsonLine())
    }

    /// The decoded event.
    public func record() throws -> EventRecord {
        try StreamedEvent.decode(json)
    }

    private static func decode(_ json: String) throws -> EventRecord {
        do {
            return try EventRecord(jsonLine: json)
        } catch {
            throw HaulError(.invalidResponse, "The daemon sent an event that could not be read: \(error)")
        }
    }
}

/// The events of an attached client: an AsyncSequence of ``EventRecord``.
///
/// ``unparsed`` gives the same events without decoding them.
public struct SessionEvents: AsyncSequence, Sendable {
    public typealias Element = EventRecord

    let feed: EventFeed

    init(client: HaulClient, session: String?, path: String, acknowledges: Bool) {
        self.feed = EventFeed(client: client, session: session, path: path, acknowledges: acknowledges)
    }

    /// The shortest time between two acknowledgements of one iterator: a burst of events
    /// costs a request a second, not one each (fifty followers of a busy daemon would keep
    /// its store writing acknowledgements). A consumer that crashes may be told again what
    /// it finished less than this before.
    static let acknowledgementInterval = Duration.seconds(1)

    /// The same events as sent, each decoded only if asked (``StreamedEvent/record()``).
    public var unparsed: UnparsedSessionEvents { UnparsedSessionEvents(feed: feed) }

    public func makeAsyncIterator() -> Iterator {
        Iterator(base: feed.makeIterator())
    }

    public struct Iterator: AsyncIteratorProtocol {
        var base: EventFeed.Iterator

        public mutating func next() async throws -> EventRecord? {
            try await base.next()?.record()
        }
    }
}

/// The events of an attached client as the daemon sent them (see ``SessionEvents``).
public struct UnparsedSessionEvents: AsyncSequence, Sendable {
    public typealias Element = StreamedEvent

    let feed: EventFeed

    public func makeAsyncIterator() -> Iterator {
        Iterator(base: feed.makeIterator())
    }

    public struct Iterator: AsyncIteratorProtocol {
        var base: EventFeed.Iterator

        public mutating func next() async throws -> StreamedEvent? {
            try await base.next()
        }

        /// Every event received and not yet handed out, as one network read brought them (at
        /// least one: it waits for one), or nil at the end: a consumer that writes them
        /// together writes once a read, not once an event. Asking for more acknowledges them all.
        public mutating func nextAvailable() async throws -> [StreamedEvent]? {
            try await base.nextAvailable()
        }
    }
}

/// One event stream of the daemon, and the acknowledgements of what its consumer is done with.
struct EventFeed: Sendable {
    let client: HaulClient
    let session: String?
    let path: String
    let acknowledges: Bool

    func makeIterator() -> Iterator {
        let (stream, continuation) = AsyncThrowingStream.makeStream(of: [StreamedEvent].self)
        let (client, path) = (self.client, self.path)
        let reader = Task { await client.stream(path, into: continuation) }
        // The latest event the consumer is done with; only the newest waits to be sent.
        let (done, acknowledgements) = AsyncStream.makeStream(of: Int64.self, bufferingPolicy: .bufferingNewest(1))
        if acknowledges, let session {
            Task {
                for await eventID in done {
                    // A failed acknowledgement only means the event may be told again.
                    try? await client.acknowledge(session: session, through: eventID)
                    try? await Task.sleep(for: SessionEvents.acknowledgementInterval)
                }
            }
        }
        continuation.onTermination = { _ in
            reader.cancel()
            acknowledgements.finish()  // The last one is still sent.
        }
        return Iterator(base: stream.makeAsyncIterator(), acknowledgements: acknowledges ? acknowledgements : nil)
    }

    struct Iterator {
        /// The events a network read at a time.
        var base: AsyncThrowingStream<[StreamedEvent], any Error>.AsyncIterator
        /// Where the events the consumer is done with go, when this stream acknowledges.
        let acknowledgements: AsyncStream<Int64>.Continuation?
        /// The last event handed out.
        var lastTaken: Int64?
        /// Events received and not yet handed out, from `pendingIndex`.
        var pending: [StreamedEvent] = []
        var pendingIndex = 0

        init(
            base: AsyncThrowingStream<[StreamedEvent], any Error>.AsyncIterator,
            acknowledgements: AsyncStream<Int64>.Continuation?
        ) {
            self.base = base
            self.acknowledgements = acknowledgements
        }

        mutating func next() async throws -> StreamedEvent? {
            acknowledgePrevious()
            while pendingIndex >= pending.count {
                guard let chunk = try await receive() else { return nil }
                (pending, pendingIndex) = (chunk, 0)
            }
            let event = pending[pendingIndex]
            pendingIndex += 1
            lastTaken = event.eventID
            return event
        }

        /// Every event received and not yet handed out: at least one (it waits for one), or
        /// nil at the end.
        mutating func nextAvailable() async throws -> [StreamedEvent]? {
            acknowledgePrevious()
            var chunk = Array(pending[min(pendingIndex, pending.count)...])
            (pending, pendingIndex) = ([], 0)
            while chunk.isEmpty {
                guard let received = try await receive() else { return nil }
                chunk = received
            }
            lastTaken = chunk.last { $0.eventID != nil }?.eventID
            return chunk
        }

        /// Asking for more says the consumer is done with what it was handed.
        private mutating func acknowledgePrevious() {
            if let eventID = lastTaken {
                acknowledgements?.yield(eventID)
                lastTaken = nil
            }
        }

        private mutating func receive() async throws -> [StreamedEvent]? {
            do {
                guard let chunk = try await base.next() else {
                    acknowledgements?.finish()
                    return nil
                }
                return chunk
            } catch {
                acknowledgements?.finish()
                throw error
            }
        }
    }
}
