import AsyncAlgorithms
import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A GET for an `http://` URL sent to an HTTP proxy in absolute form
/// (`GET http://host/path HTTP/1.1`), as curl, wget and browsers send it.
///
/// AsyncHTTPClient reaches every target through a proxy with `CONNECT`, which is right for
/// `https://` but which most proxies refuse for port 80 (Squid's default allows `CONNECT`
/// to 443 only). This sends the one request a download needs on a connection of its own
/// (`Connection: close`) and hands the answer back as an `HTTPClientResponse`, so the
/// engine reads it like any other: the body streams with backpressure, a silent proxy
/// times out, and dropping the body closes the connection.
enum ProxyForwarding {
    /// Sends `GET url` through `proxy` and returns once the response head has arrived.
    static func get(
        _ url: URL,
        headers: HTTPHeaders,
        through proxy: ProxyEndpoint,
        connectTimeout: Duration,
        readTimeout: Duration
    ) async throws -> HTTPClientResponse {
        let channel = try await ClientBootstrap(group: ClientPool.loops)
            .connectTimeout(.nanoseconds(connectTimeout.nanoseconds))
            .channelOption(.socketOption(.tcp_nodelay), value: 1)
            .connect(host: proxy.host, port: proxy.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHTTPClientHandlers()
                    try channel.pipeline.syncOperations.addHandler(
                        IdleStateHandler(readTimeout: .nanoseconds(readTimeout.nanoseconds))
                    )
                    try channel.pipeline.syncOperations.addHandler(ReadTimeoutHandler())
                    return try NIOAsyncChannel<HTTPClientResponsePart, HTTPClientRequestPart>(
                        wrappingChannelSynchronously: channel
                    )
                }
            }
        var head = HTTPRequestHead(version: .http1_1, method: .GET, uri: absoluteForm(url))
        head.headers.add(name: "Host", value: hostHeader(url))
        for (name, value) in headers { head.headers.add(name: name, value: value) }
        if let authorization = proxy.authorization {
            head.headers.add(name: "Proxy-Authorization", value: authorization)
        }
        head.headers.replaceOrAdd(name: "Connection", value: "close")

        let body = AsyncThrowingChannel<ByteBuffer, any Error>()
        let answer = HeadHandoff()
        let exchange = Task {
            do {
                try await channel.executeThenClose { inbound, outbound in
                    try await outbound.write(.head(head))
                    try await outbound.write(.end(nil))
                    var parts = inbound.makeAsyncIterator()
                    var responseHead: HTTPResponseHead?
                    while responseHead == nil, let part = try await parts.next() {
                        // 1xx answers (100 Continue, 103 Early Hints) precede the real one.
                        if case .head(let received) = part, received.status.code >= 200 { responseHead = received }
                    }
                    guard let responseHead else { throw HTTPClientError.remoteConnectionClosed }
                    answer.deliver(.success(responseHead))
                    while let part = try await parts.next() {
                        switch part {
                        case .body(let bytes): await body.send(bytes)
                        case .end:
                            body.finish()
                            return
                        case .head: throw HTTPClientError.invalidProxyResponse
                        }
                        try Task.checkCancellation()
                    }
                    // The connection closed before the end of the body.
                    body.fail(HTTPClientError.remoteConnectionClosed)
                }
            } catch {
                answer.deliver(.failure(error))
                body.fail(error)
            }
        }
        let owner = ExchangeOwner(exchange)
        let responseHead = try await withTaskCancellationHandler {
            try await answer.wait()
        } onCancel: {
            exchange.cancel()
        }
        return HTTPClientResponse(
            version: responseHead.version,
            status: responseHead.status,
            headers: responseHead.headers,
            body: .stream(ForwardedBody(channel: body, owner: owner))
        )
    }

    /// `http://host[:port]/path?query`, as the request line carries it to a proxy.
    static func absoluteForm(_ url: URL) -> String {
        var components = URLComponents(url: url, resolvingAgainstBaseURL: true) ?? URLComponents()
        components.user = nil
        components.password = nil
        components.fragment = nil
        if components.percentEncodedPath.isEmpty { components.percentEncodedPath = "/" }
        return components.string ?? url.absoluteString
    }

    /// The `Host` header for `url`: the port only when it is not the scheme's default.
    static func hostHeader(_ url: URL) -> String {
        let host = url.host ?? ""
        let named = host.contains(":") ? "[\(host)]" : host
        guard let port = url.port, port != 80 else { return named }
        return "\(named):\(port)"
    }

    /// Cancels the exchange (closing its connection) once nobody holds the body any more.
    final class ExchangeOwner: Sendable {
        let exchange: Task<Void, Never>
        init(_ exchange: Task<Void, Never>) { self.exchange = exchange }
        deinit { exchange.cancel() }
    }

    /// The response body: the exchange's bytes as they arrive, one chunk at a time.
    struct ForwardedBody: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let channel: AsyncThrowingChannel<ByteBuffer, any Error>
        let owner: ExchangeOwner

        func makeAsyncIterator() -> Iterator {
            Iterator(base: channel.makeAsyncIterator(), owner: owner)
        }

        struct Iterator: AsyncIteratorProtocol {
            var base: AsyncThrowingChannel<ByteBuffer, any Error>.Iterator
            let owner: ExchangeOwner

            mutating func next() async throws -> ByteBuffer? {
                try await base.next()
            }
        }
    }

    /// Turns a read-idle event into the HTTP client's read timeout and closes the connection.
    final class ReadTimeoutHandler: ChannelInboundHandler, Sendable {
        typealias InboundIn = HTTPClientResponsePart
        typealias InboundOut = HTTPClientResponsePart

        func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
            if let idle = event as? IdleStateHandler.IdleStateEvent, idle == .read {
                context.fireErrorCaught(HTTPClientError.readTimeout)
                context.close(promise: nil)
            } else {
                context.fireUserInboundEventTriggered(event)
            }
        }
    }
}
