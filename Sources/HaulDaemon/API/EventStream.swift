import Foundation
import Haul
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
        if let session, pauseOnDisconnect { core.clientAttached(pausing: session) }
        var clientGone = false
        do {
            // The first write goes out at once, so the client knows it is attached.
            try await writer.write(ByteBuffer(string: ServerSentEvents.heartbeat))
            var last = after
            try await sendLogged(after: &last, to: &writer)
            for await item in live {
                switch item {
                case .logged:
                    try await sendLogged(after: &last, to: &writer)
                case .progress(let record):
                    guard session == nil || record.session == session else { continue }
                    try await writer.write(ByteBuffer(string: ServerSentEvents.format(record)))
                case .heartbeat:
                    try await writer.write(ByteBuffer(string: ServerSentEvents.heartbeat))
                }
            }
            try await writer.finish(nil)
        } catch {
            clientGone = true
        }
        if let session, pauseOnDisconnect { await core.clientDetached(pausing: session, clientGone: clientGone) }
    }

    private func sendLogged(after last: inout Int64, to writer: inout any ResponseBodyWriter) async throws {
        while true {
            let records = try await core.manager.store.loggedEvents(session: session, after: last, limit: 500)
            guard !records.isEmpty else { return }
            let text = records.map(ServerSentEvents.format).joined()
            try await writer.write(ByteBuffer(string: text))
            last = records.last?.eventID ?? last
        }
    }
}
