import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// An HTTP/1.1 server on 127.0.0.1 for testing downloads, with knobs for the faults real
/// servers and networks produce: no ranges, weak or missing validators, throttling, cut
/// connections, wrong `Content-Range`, lying `Content-Length`, a file that changes, 5xx/429
/// for the first requests, redirects and `Content-Disposition` names.
///
/// It serves generated content (deterministic for a seed and version) and records every
/// request's headers so a test can assert exactly what a client sent.
///
/// ```swift
/// try await TestServer.withServer { server in
///     server.set("/file", .init(size: 1 << 20))
///     … download server.url("/file") …
///     #expect(server.requests(for: "/file").last?.header("Range") == "bytes=524288-")
/// }
/// ```
public final class TestServer: Sendable {
    struct Entry {
        var resource: Resource
        var content: [UInt8]
        var served = 0
        var bodyBytesSent = 0
    }

    private struct State {
        var entries: [String: Entry] = [:]
        var requests: [RecordedRequest] = []
        var openConnections = 0
        var maxOpenConnections = 0
        var activeResponses = 0
        var maxActiveResponses = 0
    }

    /// The port the server listens on.
    public let port: Int
    private let state = Mutex(State())
    private let holds = ResponseHolds()
    private let channel: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, ByteBuffer>, Never>
    private let runner = Mutex<Task<Void, Never>?>(nil)
    /// Finished when the accept loop has taken every connection the listener accepted.
    private let acceptEnded = AsyncStream<Void>.makeStream()
    /// The connections accepted, until served or closed (each closed by exactly one owner).
    private let accepted: AcceptedConnections

    private init(
        channel: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, ByteBuffer>, Never>,
        accepted: AcceptedConnections
    ) {
        self.channel = channel
        self.accepted = accepted
        self.port = channel.channel.localAddress?.port ?? 0
    }

    /// Starts a server on 127.0.0.1 and a free port (or `port`). Call ``shutdown()`` when done.
    public static func start(port: Int = 0) async throws -> TestServer {
        let accepted = AcceptedConnections()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: port) { child in accept(child, into: accepted) }
        return started(channel, accepted: accepted)
    }

    /// A server on a loopback socket the test bound already and kept while nothing listened
    /// (connections refused): it listens on that very socket, so the port is never free
    /// between the two for another test's socket to take. The server owns the socket from now.
    public static func start(boundSocket: Int32) async throws -> TestServer {
        guard listen(boundSocket, 128) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EINVAL) }
        let accepted = AcceptedConnections()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .bind(NIOBSDSocket.Handle(boundSocket)) { child in accept(child, into: accepted) }
        return started(channel, accepted: accepted)
    }

    private static func accept(
        _ child: any Channel,
        into accepted: AcceptedConnections
    ) -> EventLoopFuture<NIOAsyncChannel<HTTPServerRequestPart, ByteBuffer>> {
        child.eventLoop.makeCompletedFuture {
            try child.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder()))
            let connection = try NIOAsyncChannel<HTTPServerRequestPart, ByteBuffer>(
                wrappingChannelSynchronously: child
            )
            accepted.accepted(connection)
            return connection
        }
    }

    private static func started(
        _ channel: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, ByteBuffer>, Never>,
        accepted: AcceptedConnections
    ) -> TestServer {
        let server = TestServer(channel: channel, accepted: accepted)
        let task = Task { await server.acceptLoop() }
        server.runner.withLock { $0 = task }
        return server
    }

    /// Runs `body` with a started server and shuts the server down afterwards.
    public static func withServer<Result>(_ body: (TestServer) async throws -> Result) async throws -> Result {
        let server = try await start()
        do {
            let result = try await body(server)
            await server.shutdown()
            return result
        } catch {
            await server.shutdown()
            throw error
        }
    }

    /// Stops listening and closes every connection.
    ///
    /// The listener closes first and the accept loop takes what it had already accepted;
    /// a connection accepted as it closed, which the loop never sees, is closed by
    /// ``AcceptedConnections``; only then is the loop cancelled, with its connections.
    /// Dropped without its writer finished, a connection makes NIO trap (swift-nio#2637).
    public func shutdown() async {
        try? await channel.channel.close()
        for await _ in acceptEnded.stream {}
        // Any accepted connection the loop did not take (one in flight as the listener
        // closed) is closed here, not dropped.
        await accepted.closeAll()
        let task = runner.withLock { $0 }
        task?.cancel()
        await task?.value
    }

    /// `http://127.0.0.1:<port><path>`
    public func url(_ path: String) -> URL {
        URL(string: "http://127.0.0.1:\(port)\(path)")!
    }

    // MARK: Resources

    /// Serves `resource` at `path`, replacing what was there.
    public func set(_ path: String, _ resource: Resource) {
        let content = TestServer.content(of: resource)
        state.withLock { $0.entries[path] = Entry(resource: resource, content: content) }
    }

    private static func content(of resource: Resource) -> [UInt8] {
        if let body = resource.body { return body }
        var bytes = TestContent.bytes(count: resource.size, seed: resource.seed, version: resource.version)
        if let changed = resource.changedBytes, resource.version > 1 {
            let current = bytes
            bytes = TestContent.bytes(count: resource.size, seed: resource.seed, version: 1)
            for range in changed.map({ $0.clamped(to: 0..<resource.size) }) {
                bytes.replaceSubrange(range, with: current[range])
            }
        }
        for range in resource.corrupted.map({ $0.clamped(to: 0..<resource.size) }) {
            for index in range { bytes[index] ^= 0xFF }
        }
        return bytes
    }

    /// Changes the knobs of the resource at `path`; the content is regenerated when its size,
    /// seed or version change.
    public func update(_ path: String, _ change: (inout Resource) -> Void) {
        state.withLock { state in
            guard var entry = state.entries[path] else { return }
            let before = (entry.resource.size, entry.resource.seed, entry.resource.version, entry.resource.corrupted)
            change(&entry.resource)
            if before != (entry.resource.size, entry.resource.seed, entry.resource.version, entry.resource.corrupted) {
                entry.content = TestServer.content(of: entry.resource)
            }
            state.entries[path] = entry
        }
    }

    /// Makes a new version of the file: new bytes, new ETag, a later Last-Modified.
    public func bumpVersion(_ path: String) {
        update(path) { resource in
            resource.version += 1
            resource.lastModified = resource.lastModified.map { $0.addingTimeInterval(60) }
        }
    }

    /// The bytes currently served at `path`.
    public func content(_ path: String) -> [UInt8] {
        state.withLock { $0.entries[path]?.content ?? [] }
    }

    /// SHA-256 (hex) of the bytes currently served at `path`.
    public func sha256(_ path: String) -> String {
        TestContent.sha256(content(path))
    }

    /// Body bytes the server has written for `path`, over all responses.
    public func bodyBytesSent(_ path: String) -> Int {
        state.withLock { $0.entries[path]?.bodyBytesSent ?? 0 }
    }

    // MARK: Recorded traffic

    /// Every request so far, in order.
    public var requests: [RecordedRequest] { state.withLock { $0.requests } }

    /// The requests for one path, in order.
    public func requests(for path: String) -> [RecordedRequest] {
        requests.filter { $0.path == path }
    }

    /// Connections open right now (a connection closes once the server has read all it was sent).
    public var openConnections: Int { state.withLock { $0.openConnections } }

    /// The most connections that were open at once.
    public var maxOpenConnections: Int { state.withLock { $0.maxOpenConnections } }

    /// The most responses that were being sent at once (idle kept-alive connections do not count).
    public var maxActiveResponses: Int { state.withLock { $0.maxActiveResponses } }

    /// Responses being sent right now.
    public var activeResponses: Int { state.withLock { $0.activeResponses } }

    /// Responses waiting at their resource's `holdAt` right now.
    public var heldResponses: Int { holds.waiting }

    /// Lets the responses held at `path`'s `holdAt` go on, and every later one pass; all
    /// paths when `path` is nil.
    public func release(_ path: String? = nil) {
        holds.release(path)
    }

    // MARK: Serving

    private func acceptLoop() async {
        // Also when the listener fails before the loop starts: shutdown waits for this.
        defer { acceptEnded.continuation.finish() }
        try? await withThrowingDiscardingTaskGroup { group in
            try await channel.executeThenClose { inbound in
                defer { acceptEnded.continuation.finish() }
                for try await connection in inbound {
                    group.addTask { await self.serve(connection) }
                }
            }
        }
    }

    private func serve(_ connection: NIOAsyncChannel<HTTPServerRequestPart, ByteBuffer>) async {
        guard accepted.take(connection) else { return }  // Closed by the shutdown.
        state.withLock {
            $0.openConnections += 1
            $0.maxOpenConnections = max($0.maxOpenConnections, $0.openConnections)
        }
        defer { state.withLock { $0.openConnections -= 1 } }
        try? await connection.executeThenClose { inbound, outbound in
            var head: HTTPRequestHead?
            for try await part in inbound {
                switch part {
                case .head(let requestHead): head = requestHead
                case .body: continue
                case .end:
                    guard let requestHead = head else { return }
                    let keepAlive = try await respond(
                        to: requestHead,
                        outbound: outbound,
                        closed: connection.channel.closeFuture
                    )
                    if !keepAlive || !requestHead.isKeepAlive { return }
                }
            }
        }
    }

    /// Answers one request; returns whether the connection may be kept open.
    private func respond(
        to head: HTTPRequestHead,
        outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>,
        closed: EventLoopFuture<Void>
    ) async throws
        -> Bool
    {
        let path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "")
        let recorded = RecordedRequest(
            method: head.method.rawValue,
            path: path,
            headers: head.headers.map { ($0.name, $0.value) }
        )
        state.withLock {
            $0.activeResponses += 1
            $0.maxActiveResponses = max($0.maxActiveResponses, $0.activeResponses)
        }
        defer { state.withLock { $0.activeResponses -= 1 } }
        let plan = state.withLock { state -> ResponsePlan in
            state.requests.append(recorded)
            guard var entry = state.entries[path] else { return .status(404, headers: []) }
            defer { state.entries[path] = entry }
            entry.served += 1
            return ResponsePlan.make(for: head, entry: &entry)
        }
        switch plan {
        case .status(let status, let headers):
            var text = "HTTP/1.1 \(status) \(HTTPResponseStatus(statusCode: status).reasonPhrase)\r\n"
            text += "Date: \(TestServer.httpDate(Date()))\r\nContent-Length: 0\r\n"
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            text += "\r\n"
            try await outbound.write(ByteBuffer(string: text))
            return true
        case .body(let body):
            try await outbound.write(ByteBuffer(string: body.head))
            if head.method == .HEAD { return true }
            try await send(body, of: path, to: outbound, closed: closed)
            if !body.keepsConnection { return false }
            if body.chunked { try await outbound.write(ByteBuffer(string: "0\r\n\r\n")) }
            return true
        }
    }

    /// Sends a body as its plan says: paced, held, stalled or cut where it asks.
    private func send(
        _ body: ResponsePlan.Body,
        of path: String,
        to outbound: NIOAsyncChannelOutboundWriter<ByteBuffer>,
        closed: EventLoopFuture<Void>
    ) async throws {
        let bytes = body.bytes
        let limit = min(bytes.count, body.cutAfter ?? .max)
        // The pace's base: a stall (a hold, a slow reader, a loaded machine) moves it on, so the
        // bytes not sent meanwhile are never made up in a burst faster than the rate.
        var (base, sentAtBase) = (ContinuousClock.now, 0)
        var sent = 0
        let slice = body.bytesPerSecond.map { max(1024, min(64 * 1024, $0 / 20)) } ?? 64 * 1024
        var held = body.holdAfter == nil
        while sent < limit {
            if let stallAfter = body.stallAfter, sent >= stallAfter {
                try await Task.sleep(for: .seconds(3600))  // Silent until the test ends.
            }
            if !held, let holdAfter = body.holdAfter, sent >= holdAfter {
                held = true
                await holds.wait(at: path, closed: closed)
                try Task.checkCancellation()
                (base, sentAtBase) = (ContinuousClock.now, sent)
            }
            let n = min(slice, limit - sent, (body.stallAfter ?? .max) - sent, held ? .max : body.holdAfter! - sent)
            var buffer = ByteBuffer()
            if body.chunked { buffer.writeString(String(n, radix: 16) + "\r\n") }
            buffer.writeBytes(bytes[bytes.startIndex + sent..<bytes.startIndex + sent + n])
            if body.chunked { buffer.writeString("\r\n") }
            try await outbound.write(buffer)
            sent += n
            state.withLock { $0.entries[path]?.bodyBytesSent += n }
            if let bytesPerSecond = body.bytesPerSecond {
                let due = base + .milliseconds(Int64(sent - sentAtBase) * 1000 / Int64(bytesPerSecond))
                let now = ContinuousClock.now
                if due < now - .seconds(1) {
                    (base, sentAtBase) = (now, sent)  // Behind by more than a second: no burst.
                } else {
                    try await Task.sleep(until: due, clock: .continuous)
                }
            }
        }
    }

    static func httpDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
