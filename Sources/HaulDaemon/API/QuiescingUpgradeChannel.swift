import HummingbirdCore
import HummingbirdWebSocket
import Logging
import NIOCore
import NIOHTTP1

/// The daemon's connections: HTTP/1.1 that may upgrade to aria2's WebSocket, closed at a
/// graceful shutdown when no request has begun on them.
///
/// Hummingbird closes an idle HTTP connection when the server quiesces, but not one still
/// waiting for its first request head, where the WebSocket upgrade handler sits: a client
/// that opened a connection and sent nothing (an HTTP client's pool opens spare ones), or
/// only part of a head, held the daemon's stop until it went away — for ever, with a pooled
/// client that keeps it. Such a connection is closed instead; nothing of a request was
/// taken on it.
struct QuiescingUpgradeChannel: ServerChildChannel {
    let base: HTTP1WebSocketUpgradeChannel

    func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<HTTP1WebSocketUpgradeChannel.Value> {
        base.setup(channel: channel, logger: logger).flatMapThrowing { value in
            try channel.pipeline.syncOperations.addHandler(CloseBeforeFirstRequest(), position: .first)
            return value
        }
    }

    func handle(value: HTTP1WebSocketUpgradeChannel.Value, logger: Logger) async {
        await base.handle(value: value, logger: logger)
    }
}

/// Closes its connection on ``ChannelShouldQuiesceEvent`` while the upgrade handler still
/// waits for the first request head; afterwards the HTTP or WebSocket handlers that replaced
/// it finish what is under way and close.
private final class CloseBeforeFirstRequest: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            let upgrade = NIOTypedHTTPServerUpgradeHandler<HTTP1WebSocketUpgradeChannel.UpgradeResult>.self
            if (try? context.pipeline.syncOperations.handler(type: upgrade)) != nil {
                context.close(promise: nil)
                return
            }
        }
        context.fireUserInboundEventTriggered(event)
    }
}
