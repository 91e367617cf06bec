import Foundation
import Haul
import HaulWire
import HaulWireMapping
import Hummingbird

/// One client's stream of events (Server-Sent Events): the logged events after `after`,
/// then live ones as they happen, with a heartbeat every second. It ends when the client
/// goes or the daemon stops.
struct EventStream: Sendable {
    let core: DaemonCore
    /// One session's events, or every session's (nil).
    let session: String?
    let after: Int64
    /// Pause the session's tasks when the client goes (not when the daemon stops).
    let pauseOnDisconnect: Bool

    func response() -> Response {
        Response(
            status: .ok,
            headers: [.contentType: "text/event-stream", .cacheControl: "no-cache"],
            body: ResponseBody { writer in
                try await self.write(to: &writer)
            }
        )
    }

    private func write(to writer: inout any ResponseBodyWriter) async throws {
        let (live, stopListening) = core.eventLog.listen()
        defer { stopListening() }
        // Registered before the first read, so no acknowledgement deletes what it has yet to send.
        let reader = core.readerAttached(session: session, sent: after)
        if let session, pauseOnDisconnect { core.clientAttached(pausing: session) }
        var clientGone = false
        do {
            // The first write goes out at once, so the client knows it is attached.
            try await writer.write(ByteBuffer(string: ServerSentEvents.heartbeat))
            var position = Position(sent: after, seenThrough: try await core.lastEventID())
            var out = Pending(reader: reader, reported: after)
            try await sendLogged(&position, &out, to: &writer)
            // Whatever the log told while the last batch was being written goes out in one write.
            while let items = await live.next() {
                for item in items {
                    try await add(item, &position, &out, to: &writer)
                }
                try await out.flush(position, to: &writer, core: core)
            }
            try await writer.finish(nil)
        } catch {
            clientGone = true
        }
        await core.readerDetached(reader, session: session)
        if let session, pauseOnDisconnect { await core.clientDetached(pausing: session, clientGone: clientGone) }
    }

    /// Where the stream is: the last event it sent of its session(s), and the log id
    /// through which it has seen every event (sent or not its own).
    private struct Position {
        var sent: Int64
        var seenThrough: Int64
    }

    /// Text made ready for the stream's next write, and the last logged event the store was
    /// told this stream sent (it keeps what a stream has yet to send from being pruned).
    private struct Pending {
        let reader: UUID
        var bytes = ByteBuffer()
        var reported: Int64

        /// Writes what is ready, if anything, then tells the store how far the stream got.
        mutating func flush(
            _ position: Position,
            to writer: inout any ResponseBodyWriter,
            core: DaemonCore
        ) async throws {
            guard bytes.readableBytes > 0 else { return }
            try await writer.write(bytes)
            bytes.clear()
            if reported != position.sent {
                reported = position.sent
                core.readerAdvanced(reader, sent: position.sent)
            }
        }
    }

    /// Adds one live item to what is ready to write; logged events this stream missed
    /// (its listener overflowed, or another daemon logged them) are read from the store,
    /// after what was ready is written.
    private func add(
        _ item: LiveItem,
        _ position: inout Position,
        _ out: inout Pending,
        to writer: inout any ResponseBodyWriter
    ) async throws {
        switch item {
        case .logged(let events, let previous):
            if position.seenThrough >= previous {
                // Nothing missed: these are the next events, from memory.
                add(events.filter { isMine($0.record) }, &position, to: &out)
            } else {
                // The live buffer overflowed: what it dropped is in the store.
                try await sendLogged(&position, &out, to: &writer)
            }
            position.seenThrough = max(position.seenThrough, events.last?.record.eventID ?? previous)
        case .progress(let event):
            guard isMine(event.record) else { return }
            out.bytes.writeString(event.text)
        case .heartbeat:
            // Anything else in the same write says as much.
            if out.bytes.readableBytes == 0 { out.bytes.writeString(ServerSentEvents.heartbeat) }
        case .elsewhere:
            try await sendLogged(&position, &out, to: &writer)
        }
    }

    /// Whether the stream sends `record`: one of its session's, or one about no task.
    private func isMine(_ record: EventRecord) -> Bool {
        session == nil || record.session == session || record.taskID == nil
    }

    /// Sends the logged events after what was sent, from the store, after what was ready.
    private func sendLogged(
        _ position: inout Position,
        _ out: inout Pending,
        to writer: inout any ResponseBodyWriter
    ) async throws {
        try await out.flush(position, to: &writer, core: core)
        while true {
            let records = try await core.loggedEvents(session: session, after: position.sent, limit: 500)
            guard !records.isEmpty else { return }
            add(records.map(LiveEvent.init), &position, to: &out)
            try await out.flush(position, to: &writer, core: core)
            position.seenThrough = max(position.seenThrough, position.sent)
        }
    }

    /// Adds those of `events` after what was sent to what is ready to write.
    private func add(_ events: [LiveEvent], _ position: inout Position, to out: inout Pending) {
        for event in events where (event.record.eventID ?? 0) > position.sent {
            out.bytes.writeString(event.text)
            position.sent = event.record.eventID ?? position.sent
        }
    }
}
