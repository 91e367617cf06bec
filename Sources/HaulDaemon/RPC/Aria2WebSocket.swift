import Foundation
import Haul
import Hummingbird
import HummingbirdCore
import HummingbirdWebSocket

/// JSON-RPC over WebSocket at `/jsonrpc`, as aria2 serves it: each text message a request
/// (or a batch) answered in a text message, and aria2's notifications pushed to every
/// client as downloads start, pause, stop, complete or fail.
///
/// Like aria2's, a notification carries only the download's GID (no URL, no path) and goes
/// to every client; acting on one needs the secret.
extension Aria2RPC {
    /// The most a client may send in one message.
    static let maxMessage = 1 << 20
    /// Messages waiting for a client that reads nothing; past this it is disconnected (its
    /// library reconnects and asks again) rather than held in memory.
    static let maxPending = 10_000

    /// HTTP/1.1 that upgrades a request for `/jsonrpc` to this WebSocket; every other request
    /// goes to the router. A connection with no request begun closes at a graceful shutdown
    /// (``QuiescingUpgradeChannel``).
    var webSocketServer: HTTPServerBuilder {
        HTTPServerBuilder { responder in
            QuiescingUpgradeChannel(
                base: HTTP1WebSocketUpgradeChannel(responder: responder, configuration: .init()) { request, _, _ in
                    guard request.path?.split(separator: "?", maxSplits: 1).first == "/jsonrpc" else {
                        return .dontUpgrade
                    }
                    return .upgrade([:]) { inbound, outbound, _ in
                        try await serve(inbound: inbound, outbound: outbound)
                    }
                }
            )
        }
    }

    /// Serves one WebSocket connection until the client closes it or the daemon stops.
    func serve(inbound: WebSocketInboundStream, outbound: WebSocketOutboundWriter) async throws {
        let (messages, pending) = AsyncStream<String>.makeStream(bufferingPolicy: .bufferingOldest(Self.maxPending))
        let events = core.manager.events()
        try await withThrowingTaskGroup(of: Void.self) { group in
            // One writer: answers and notifications never interleave inside a frame.
            group.addTask {
                for await text in messages { try await outbound.write(.text(text)) }
            }
            group.addTask {
                for await event in events {
                    guard let notification = Self.notification(for: event) else { continue }
                    if case .dropped = pending.yield(notification) { throw CancellationError() }
                }
            }
            group.addTask {
                for try await message in inbound.messages(maxSize: Self.maxMessage) {
                    guard case .text(let text) = message else { continue }
                    let answer = await respond(to: Data(text.utf8))
                    if case .dropped = pending.yield(String(decoding: answer.body, as: UTF8.self)) {
                        throw CancellationError()
                    }
                }
            }
            // The first to end (the client left, or fell too far behind) ends the others.
            defer { pending.finish() }
            _ = try await group.next()
            group.cancelAll()
        }
    }

    /// aria2's notification for an event, when it has one.
    static func notification(for event: DownloadEvent) -> String? {
        let method: String
        let id: UUID
        switch event {
        case .stateChanged(let task, _, .running, _):
            (method, id) = ("aria2.onDownloadStart", task)
        case .stateChanged(let task, _, .paused, _):
            (method, id) = ("aria2.onDownloadPause", task)
        case .stateChanged(let task, _, .cancelled, _):
            (method, id) = ("aria2.onDownloadStop", task)
        case .completed(let task, _):
            (method, id) = ("aria2.onDownloadComplete", task)
        case .failed(let task, _):
            (method, id) = ("aria2.onDownloadError", task)
        default:
            return nil
        }
        let body: JSONValue = ["jsonrpc": "2.0", "method": .string(method), "params": [["gid": .string(GID.of(id))]]]
        return String(decoding: encode(body), as: UTF8.self)
    }
}
