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
            try await sendLogged(&position, to: &writer, reader: reader)
            for await item in live {
                switch item {
                case .logged(let events, let previous):
                    if position.seenThrough >= previous {
                        // Nothing missed: these are the next events, from memory.
                        try await send(events.filter { isMine($0.record) }, &position, to: &writer, reader: reader)
                    } else {
                        // The live buffer overflowed: what it dropped is in the store.
                        try await sendLogged(&position, to: &writer, reader: reader)
                    }
                    position.seenThrough = max(position.seenThrough, events.last?.record.eventID ?? previous)
                case .progress(let event):
                    guard isMine(event.record) else { continue }
                    try await writer.write(ByteBuffer(string: event.text))
                case .heartbeat:
                    try await writer.write(ByteBuffer(string: ServerSentEvents.heartbeat))
                case .elsewhere:
                    try await sendLogged(&position, to: &writer, reader: reader)
                }
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

    /// Whether the stream sends `record`: one of its session's, or one about no task.
    private func isMine(_ record: EventRecord) -> Bool {
        session == nil || record.session == session || record.taskID == nil
    }

    /// Sends the logged events after what was sent, from the store.
    private func sendLogged(
        _ position: inout Position,
        to writer: inout any ResponseBodyWriter,
        reader: UUID
    ) async throws {
        while true {
            let records = try await core.loggedEvents(session: session, after: position.sent, limit: 500)
            guard !records.isEmpty else { return }
            try await send(records.map(LiveEvent.init), &position, to: &writer, reader: reader)
            position.seenThrough = max(position.seenThrough, position.sent)
        }
    }

    /// Sends those of `events` after what was sent, and says how far it got.
    private func send(
        _ events: [LiveEvent],
        _ position: inout Position,
        to writer: inout any ResponseBodyWriter,
        reader: UUID
    ) async throws {
        let fresh = events.filter { ($0.record.eventID ?? 0) > position.sent }
        guard let last = fresh.last?.record.eventID else { return }
        try await writer.write(ByteBuffer(string: fresh.map(\.text).joined()))
        position.sent = last
        core.readerAdvanced(reader, sent: last)
    }
}
