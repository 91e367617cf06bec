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
    /// How the server labels a resource's version.
    public enum ETagStyle: Sendable, Equatable {
        /// `"v<version>-<seed>"`
        case strong
        /// `W/"v<version>-<seed>"`
        case weak
        /// No ETag header.
        case none
        /// This strong ETag, whatever the version (a mirror's own).
        case fixed(String)
    }

    /// Ways to break `Content-Range` on 206 responses.
    public enum ContentRangeFault: Sendable, Equatable {
        /// The first byte position is off by this many bytes (the body is the honest range).
        case shiftedStart(Int)
        /// The complete length is off by this many bytes.
        case wrongTotal(Int)
        /// Unparseable.
        case malformed
    }

    /// Ways to lie about a body's length.
    public enum LengthLie: Sendable, Equatable {
        /// Promise this many bytes more than are sent, then close the connection.
        case short(Int)
        /// Send this many bytes more than the headers promise (chunked framing makes it possible).
        case long(Int)
    }

    /// A file the server serves, and how it misbehaves.
    public struct Resource: Sendable {
        /// Length in bytes.
        public var size: Int
        /// Seed of the generated content.
        public var seed: UInt64
        /// Content version; bumping it changes the bytes, the ETag and Last-Modified.
        public var version: Int
        public var etag: ETagStyle
        /// `Last-Modified`, or nil for none.
        public var lastModified: Date?
        /// Whether Range requests are honoured.
        public var ranges: Bool
        /// A `Content-Disposition` header value.
        public var contentDisposition: String?
        /// Throttle each response to this many bytes per second.
        public var bytesPerSecond: Int?
        /// Throttle only responses to requests without a Range header (a download's first
        /// connection) to this many bytes per second: a slow connection among fast ones.
        public var unrangedBytesPerSecond: Int?
        /// Close the connection after this many body bytes.
        public var cutAfter: Int?
        /// How many responses get the `cutAfter`, `lengthLie` and `contentRangeFault` faults
        /// (then the resource is served honestly).
        public var faultyResponses: Int
        public var contentRangeFault: ContentRangeFault?
        public var lengthLie: LengthLie?
        /// Answer the first `failFirst` requests with `failStatus` (and `Retry-After` when set).
        public var failFirst: Int
        /// Answer this many requests that carry a Range header with `failStatus`: a server
        /// that refuses a client's extra connections.
        public var failRanged: Int
        /// Ranged requests served as usual before `failRanged` begins (a mirror that fails
        /// after it was checked and served a segment).
        public var passRanged = 0
        public var failStatus: Int
        public var retryAfter: String?
        /// Answer with a redirect to this location instead of content.
        public var redirectTo: String?
        public var redirectStatus: Int
        /// Send the body chunked, without Content-Length.
        public var chunked: Bool
        /// Answer whole-file requests as an HTTP/1.0 server streaming generated content would:
        /// no Content-Length, the end of the body marked only by closing the connection (so
        /// a `cutAfter` looks exactly like the end).
        public var closeDelimited: Bool
        /// Every response goes silent (sends nothing more, keeps the connection open) once it
        /// reaches this offset of the file: a server that stalls at the same point each time.
        public var stallAt: Int?
        /// Every response waits once it reaches this offset of the file until the test calls
        /// ``TestServer/release(_:)`` for the path: downloads held under way for as long as
        /// the test needs, however slow the machine.
        public var holdAt: Int?
        /// When set, a new version changes only these byte ranges and keeps the rest of
        /// version 1: a file whose bytes around a resume point stay the same while others change.
        public var changedBytes: [Range<Int>]?
        /// Bytes served inverted (each XOR 0xFF) in every response, with the same ETag and
        /// length: a mirror whose copy is damaged in places.
        public var corrupted: [Range<Int>] = []
        /// Bytes served as they are instead of generated ones (`size` is their count).
        public var body: [UInt8]?
        /// A `Content-Type` header value.
        public var contentType: String?
        /// More header fields sent with every answer that carries the body (a digest, say).
        public var headers: [(name: String, value: String)] = []

        public init(
            size: Int,
            seed: UInt64 = 1,
            etag: ETagStyle = .strong,
            lastModified: Date? = Date(timeIntervalSince1970: 1_600_000_000),
            ranges: Bool = true,
            contentDisposition: String? = nil,
            bytesPerSecond: Int? = nil,
            unrangedBytesPerSecond: Int? = nil,
            cutAfter: Int? = nil,
            faultyResponses: Int = .max,
            contentRangeFault: ContentRangeFault? = nil,
            lengthLie: LengthLie? = nil,
            failFirst: Int = 0,
            failRanged: Int = 0,
            failStatus: Int = 503,
            retryAfter: String? = nil,
            redirectTo: String? = nil,
            redirectStatus: Int = 302,
            chunked: Bool = false,
            closeDelimited: Bool = false,
            stallAt: Int? = nil,
            holdAt: Int? = nil,
            changedBytes: [Range<Int>]? = nil,
            corrupted: [Range<Int>] = []
        ) {
            self.size = size
            self.seed = seed
            self.version = 1
            self.etag = etag
            self.lastModified = lastModified
            self.ranges = ranges
            self.contentDisposition = contentDisposition
            self.bytesPerSecond = bytesPerSecond
            self.unrangedBytesPerSecond = unrangedBytesPerSecond
            self.cutAfter = cutAfter
            self.faultyResponses = faultyResponses
            self.contentRangeFault = contentRangeFault
            self.lengthLie = lengthLie
            self.failFirst = failFirst
            self.failRanged = failRanged
            self.failStatus = failStatus
            self.retryAfter = retryAfter
            self.redirectTo = redirectTo
            self.redirectStatus = redirectStatus
            self.chunked = chunked
            self.closeDelimited = closeDelimited
            self.stallAt = stallAt
            self.holdAt = holdAt
            self.changedBytes = changedBytes
            self.corrupted = corrupted
        }

        /// `text` served as it is, with a `Content-Type`.
        public static func document(_ text: String, contentType: String) -> Resource {
            var resource = Resource(size: text.utf8.count)
            resource.body = Array(text.utf8)
            resource.contentType = contentType
            return resource
        }

        /// A redirect to `location`.
        public static func redirect(to location: String, status: Int = 302) -> Resource {
            Resource(size: 0, redirectTo: location, redirectStatus: status)
        }

        var etagValue: String? {
            switch etag {
            case .strong: return "\"v\(version)-\(seed)\""
            case .weak: return "W/\"v\(version)-\(seed)\""
            case .none: return nil
            case .fixed(let value): return value
            }
        }
    }

    /// A request as the server saw it.
    public struct RecordedRequest: Sendable {
        public var method: String
        public var path: String
        public var headers: [(name: String, value: String)]

        /// The first value of a header, compared case-insensitively.
        public func header(_ name: String) -> String? {
            headers.first { $0.name.lowercased() == name.lowercased() }?.value
        }
    }

    private struct Entry {
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

    private init(channel: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, ByteBuffer>, Never>) {
        self.channel = channel
        self.port = channel.channel.localAddress?.port ?? 0
    }

    /// Starts a server on 127.0.0.1 and a free port (or `port`). Call ``shutdown()`` when done.
    public static func start(port: Int = 0) async throws -> TestServer {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: port) { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.addHandler(ByteToMessageHandler(HTTPRequestDecoder()))
                    return try NIOAsyncChannel<HTTPServerRequestPart, ByteBuffer>(wrappingChannelSynchronously: child)
                }
            }
        let server = TestServer(channel: channel)
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
    /// only then is the loop cancelled, with its connections. Cancelled earlier, a
    /// connection accepted in that moment would be dropped without its writer finished,
    /// which NIO traps on (swift-nio#2637).
    public func shutdown() async {
        try? await channel.channel.close()
        for await _ in acceptEnded.stream {}
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

    private enum Plan {
        case status(Int, headers: [(String, String)])
        case body(
            status: Int,
            headers: [(String, String)],
            bytes: ArraySlice<UInt8>,
            declared: Int?,
            cutAfter: Int?,
            chunked: Bool,
            closeDelimited: Bool,
            stallAfter: Int?,
            holdAfter: Int?,
            bytesPerSecond: Int?
        )
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
        let plan = state.withLock { state -> Plan in
            state.requests.append(recorded)
            guard var entry = state.entries[path] else { return .status(404, headers: []) }
            defer { state.entries[path] = entry }
            entry.served += 1
            return TestServer.plan(for: head, entry: &entry)
        }
        switch plan {
        case .status(let status, let headers):
            var text = "HTTP/1.1 \(status) \(HTTPResponseStatus(statusCode: status).reasonPhrase)\r\n"
            text += "Date: \(TestServer.httpDate(Date()))\r\nContent-Length: 0\r\n"
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            text += "\r\n"
            try await outbound.write(ByteBuffer(string: text))
            return true
        case .body(
            let status,
            let headers,
            let bytes,
            let declared,
            let cutAfter,
            let chunked,
            let closeDelimited,
            let stallAfter,
            let holdAfter,
            let bytesPerSecond
        ):
            let version = closeDelimited ? "HTTP/1.0" : "HTTP/1.1"
            var text = "\(version) \(status) \(HTTPResponseStatus(statusCode: status).reasonPhrase)\r\n"
            text += "Date: \(TestServer.httpDate(Date()))\r\n"
            if closeDelimited {
                text += "Connection: close\r\n"
            } else if chunked {
                text += "Transfer-Encoding: chunked\r\n"
            } else {
                text += "Content-Length: \(declared ?? bytes.count)\r\n"
            }
            for (name, value) in headers { text += "\(name): \(value)\r\n" }
            text += "\r\n"
            try await outbound.write(ByteBuffer(string: text))
            if head.method == .HEAD { return true }
            let limit = min(bytes.count, cutAfter ?? .max)
            let started = ContinuousClock.now
            var sent = 0
            let slice = bytesPerSecond.map { max(1024, min(64 * 1024, $0 / 20)) } ?? 64 * 1024
            var held = holdAfter == nil
            while sent < limit {
                if let stallAfter, sent >= stallAfter {
                    try await Task.sleep(for: .seconds(3600))  // Silent until the test ends.
                }
                if !held, let holdAfter, sent >= holdAfter {
                    held = true
                    await holds.wait(at: path, closed: closed)
                    try Task.checkCancellation()
                }
                let n = min(slice, limit - sent, (stallAfter ?? .max) - sent, held ? .max : holdAfter! - sent)
                let piece = bytes[bytes.startIndex + sent..<bytes.startIndex + sent + n]
                var buffer = ByteBuffer()
                if chunked { buffer.writeString(String(n, radix: 16) + "\r\n") }
                buffer.writeBytes(piece)
                if chunked { buffer.writeString("\r\n") }
                try await outbound.write(buffer)
                sent += n
                state.withLock {
                    $0.entries[head.uri.split(separator: "?").first.map(String.init) ?? ""]?.bodyBytesSent += n
                }
                if let bytesPerSecond {
                    let due = started + .milliseconds(Int64(sent) * 1000 / Int64(bytesPerSecond))
                    try await Task.sleep(until: due, clock: .continuous)
                }
            }
            if closeDelimited || limit < bytes.count || (declared ?? bytes.count) > bytes.count { return false }
            if chunked { try await outbound.write(ByteBuffer(string: "0\r\n\r\n")) }
            return true
        }
    }

    /// Decides the response to a request, applying the resource's knobs. Called under the lock.
    private static func plan(for head: HTTPRequestHead, entry: inout Entry) -> Plan {
        let resource = entry.resource
        if entry.served <= resource.failFirst {
            var headers: [(String, String)] = []
            if let retryAfter = resource.retryAfter { headers.append(("Retry-After", retryAfter)) }
            return .status(resource.failStatus, headers: headers)
        }
        if resource.failRanged > 0, head.headers.first(name: "Range") != nil {
            if resource.passRanged > 0 {
                entry.resource.passRanged -= 1
            } else {
                entry.resource.failRanged -= 1
                return .status(resource.failStatus, headers: [])
            }
        }
        if let location = resource.redirectTo {
            return .status(resource.redirectStatus, headers: [("Location", location)])
        }
        let size = entry.content.count
        var headers: [(String, String)] = []
        if let etag = resource.etagValue { headers.append(("ETag", etag)) }
        if let lastModified = resource.lastModified { headers.append(("Last-Modified", httpDate(lastModified))) }
        if let disposition = resource.contentDisposition { headers.append(("Content-Disposition", disposition)) }
        if let type = resource.contentType { headers.append(("Content-Type", type)) }
        if resource.ranges { headers.append(("Accept-Ranges", "bytes")) }
        headers += resource.headers.map { ($0.name, $0.value) }

        let faulty = entry.resource.faultyResponses > 0
        if faulty, resource.cutAfter != nil || resource.lengthLie != nil || resource.contentRangeFault != nil {
            entry.resource.faultyResponses -= 1
        }
        let cutAfter = faulty ? resource.cutAfter : nil
        var chunked = resource.chunked
        var extra = 0
        var declared: Int?
        switch faulty ? resource.lengthLie : nil {
        case .short(let n): declared = n
        case .long(let n):
            chunked = true
            extra = n
        case nil: break
        }

        var status = 200
        var range = 0..<size
        if resource.ranges, let requested = head.headers.first(name: "Range").flatMap(parseRange),
            ifRangeHolds(head.headers.first(name: "If-Range"), resource: resource)
        {
            if requested.first >= size {
                return .status(416, headers: headers + [("Content-Range", "bytes */\(size)")])
            }
            let last = min(requested.last ?? size - 1, size - 1)
            range = requested.first..<(last + 1)
            status = 206
            let contentRange: String
            switch faulty ? resource.contentRangeFault : nil {
            case .shiftedStart(let delta): contentRange = "bytes \(range.lowerBound + delta)-\(last + delta)/\(size)"
            case .wrongTotal(let delta): contentRange = "bytes \(range.lowerBound)-\(last)/\(size + delta)"
            case .malformed: contentRange = "bytes=\(range.lowerBound)-"
            case nil: contentRange = "bytes \(range.lowerBound)-\(last)/\(size)"
            }
            headers.append(("Content-Range", contentRange))
        }
        var body = entry.content[range]
        if extra > 0 { body = ArraySlice(Array(body) + [UInt8](repeating: 0x5A, count: extra)) }
        let declaredLength = declared.map { body.count + $0 }
        return .body(
            status: status,
            headers: headers,
            bytes: body,
            declared: declaredLength,
            cutAfter: cutAfter,
            chunked: chunked,
            closeDelimited: resource.closeDelimited && status == 200,
            stallAfter: resource.stallAt.map { max(0, $0 - range.lowerBound) },
            holdAfter: resource.holdAt.map { max(0, $0 - range.lowerBound) },
            bytesPerSecond: head.headers.first(name: "Range") == nil
                ? resource.unrangedBytesPerSecond ?? resource.bytesPerSecond : resource.bytesPerSecond
        )
    }

    /// `If-Range` holds when it equals the current strong ETag, or the Last-Modified date.
    /// A weak ETag never matches (RFC 9110 §13.1.5).
    private static func ifRangeHolds(_ value: String?, resource: Resource) -> Bool {
        guard let value else { return true }
        if value.hasPrefix("\"") {
            return resource.etag != .weak && resource.etag != .none && value == resource.etagValue
        }
        if value.hasPrefix("W/") { return false }
        return resource.lastModified.map { httpDate($0) == value } ?? false
    }

    /// `bytes=N-` or `bytes=N-M`; nil for anything else (including several ranges).
    private static func parseRange(_ value: String) -> (first: Int, last: Int?)? {
        guard value.hasPrefix("bytes="), !value.contains(",") else { return nil }
        let spec = value.dropFirst("bytes=".count).split(separator: "-", omittingEmptySubsequences: false)
        guard spec.count == 2, let first = Int(spec[0]) else { return nil }
        if spec[1].isEmpty { return (first, nil) }
        guard let last = Int(spec[1]), last >= first else { return nil }
        return (first, last)
    }

    static func httpDate(_ date: Date) -> String {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        formatter.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return formatter.string(from: date)
    }
}
