import AsyncHTTPClient
import Foundation
import Haul
import HaulWire
import HaulWireMapping
import NIOCore
import NIOFoundationCompat
import NIOHTTP1

/// A client of `haul daemon`: the same operations as a ``DownloadManager``, carried out by
/// the daemon, whose transfers go on after this process exits.
///
/// ```swift
/// try await HaulClient.withClient(home: HaulHome.resolve()) { client in
///     let added = try await client.add([DownloadRequest(url: url, destination: .directory("/data"), session: "backup")])
///     for try await event in client.attach(session: "backup") {   // missed events first, then live ones
///         print(event.kind, event.taskID)
///     }
/// }
/// ```
public final class HaulClient: Sendable {
    let http: HTTPClient
    private let base: String
    private let token: String?

    /// A client of the daemon of `home`, over its Unix socket.
    public convenience init(home: HaulHome) {
        self.init(socketPath: DaemonPaths(home: home).socket)
    }

    /// A client over a Unix socket.
    public init(socketPath: String) {
        let encoded = socketPath.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? socketPath
        self.base = "http+unix://\(encoded)"
        self.token = nil
        self.http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: HaulClient.httpConfiguration)
    }

    /// A client over TCP, sending `token` with every request.
    public init(host: String, port: Int, token: String) {
        self.base = "http://\(host):\(port)"
        self.token = token
        self.http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: HaulClient.httpConfiguration)
    }

    private static var httpConfiguration: HTTPClient.Configuration {
        var configuration = HTTPClient.Configuration.haul
        configuration.timeout = .init(connect: .seconds(2), read: nil)
        return configuration
    }

    /// Runs `body` with a client, and closes it afterwards.
    public static func withClient<Result>(
        home: HaulHome,
        _ body: (HaulClient) async throws -> Result
    ) async throws -> Result {
        let client = HaulClient(home: home)
        do {
            let result = try await body(client)
            try await client.shutdown()
            return result
        } catch {
            try? await client.shutdown()
            throw error
        }
    }

    /// Closes the client's connections. Call once, when done.
    public func shutdown() async throws {
        try await http.shutdown()
    }

    // MARK: Operations

    /// The daemon's facts: pid, uptime, paths, task counts, speed and limits.
    public func status(timeout: Duration = .seconds(10)) async throws -> API.Status {
        try await call("GET", "/status", timeout: timeout)
    }

    /// That the daemon answers, and which one: counts nothing, so it answers at once
    /// however many tasks the daemon holds (what a client probes with).
    public func health(timeout: Duration = .seconds(10)) async throws -> API.Health {
        try await call("GET", "/health", timeout: timeout)
    }

    /// Adds downloads to the daemon's queue (or finds them there, so a re-add does not duplicate).
    public func add(_ requests: [DownloadRequest], priority: Int? = nil) async throws -> [DownloadInfo] {
        try await post(try AddBatchBody(requests, priority: priority)).tasks()
    }

    /// Adds the downloads of a batch encoded already (made ready while an earlier one was
    /// on its way); returns once the daemon has them all, its answer not yet decoded.
    /// - Throws: the daemon's refusal (nothing of the batch added) or a connection's failure.
    public func post(_ body: AddBatchBody) async throws -> AddBatchAnswer {
        AddBatchAnswer(bytes: try await answer("POST", "/tasks", bytes: body.bytes))
    }

    /// The daemon's tasks, in queue order; of one session, or all; with `page`, only that
    /// page of them (the next page: after the last task of this one).
    /// - Throws: ``HaulError/Code/notFound`` when the page's `after` task no longer exists.
    public func tasks(session: String? = nil, page: TaskPage? = nil) async throws -> [DownloadInfo] {
        var query: [String] = []
        if let session {
            try DownloadRequest.validateSession(session)
            query.append("session=\(session)")
        }
        if let page { query.append("limit=\(page.limit)") }
        if let after = page?.after { query.append("after=\(after.uuidString)") }
        let tasks: [API.Task] = try await call(
            "GET",
            "/tasks" + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))
        )
        return try tasks.map(DownloadInfo.init)
    }

    /// One task.
    public func info(_ id: UUID) async throws -> DownloadInfo {
        try DownloadInfo(try await call("GET", "/tasks/\(id.uuidString)") as API.Task)
    }

    /// Applies an operation to tasks: pause (keeping data), resume, cancel (deleting partial
    /// data), or remove (with ``API/Selector/deleteFiles``, also finished files).
    /// Named tasks must all exist and allow it, or nothing changes.
    /// - Returns: the tasks it applied to.
    @discardableResult
    public func perform(_ operation: TaskOperation, _ selector: API.Selector) async throws -> [DownloadInfo] {
        let tasks: [API.Task] = try await call("POST", "/tasks/\(operation.rawValue)", body: selector)
        return try tasks.map(DownloadInfo.init)
    }

    /// Pauses tasks, keeping their data; returns those paused.
    @discardableResult
    public func pause(_ selector: API.Selector) async throws -> [DownloadInfo] {
        try await perform(.pause, selector)
    }

    /// Resumes paused or failed tasks; returns those queued again.
    @discardableResult
    public func resume(_ selector: API.Selector) async throws -> [DownloadInfo] {
        try await perform(.resume, selector)
    }

    /// Cancels tasks, deleting their partial data; returns those cancelled.
    @discardableResult
    public func cancel(_ selector: API.Selector) async throws -> [DownloadInfo] {
        try await perform(.cancel, selector)
    }

    /// Forgets tasks (cancelling unfinished ones); `deleteFiles` also deletes finished files.
    @discardableResult
    public func remove(_ selector: API.Selector, deleteFiles: Bool = false) async throws -> [DownloadInfo] {
        var selector = selector
        selector.deleteFiles = deleteFiles ? true : nil
        return try await perform(.remove, selector)
    }

    /// The limits in force.
    /// In a fleet, `node` names the node whose own limits to show (default: this daemon's).
    public func settings(node: String? = nil) async throws -> API.Settings {
        try await call("GET", "/settings" + Self.nodeQuery(node))
    }

    /// Changes limits live, with the manager's ordering rules. In a fleet, `node` names the
    /// node whose own limits change (default: this daemon's), and `settings.fleet` the caps.
    @discardableResult
    public func update(_ settings: API.Settings, node: String? = nil) async throws -> API.Settings {
        try await call("PUT", "/settings" + Self.nodeQuery(node), body: settings)
    }

    /// `?node=NAME` (a node's name is letters, digits, `.`, `_` and `-`: nothing to escape;
    /// anything else is escaped, for the daemon to refuse by name).
    private static func nodeQuery(_ node: String?) -> String {
        guard let node else { return "" }
        return "?node="
            + (node.addingPercentEncoding(withAllowedCharacters: .urlQueryAllowed.subtracting(["&", "=", "+", "#"]))
                ?? "")
    }

    /// Changes the rate limit of tasks, live (bytes per second; nil for none); returns them.
    @discardableResult
    public func setRateLimit(_ bytesPerSecond: Int64?, _ selector: API.Selector) async throws -> [DownloadInfo] {
        let tasks: [API.Task] = try await call(
            "POST",
            "/tasks/rate-limit",
            body: API.RateLimitChange(tasks: selector, bytesPerSecond: bytesPerSecond ?? 0)
        )
        return try tasks.map(DownloadInfo.init)
    }

    /// A one-time link that logs a browser into the daemon's dashboard (needs its TCP listener).
    public func loginLink() async throws -> API.LoginLink {
        try await call("POST", "/login-links")
    }

    /// Sessions with tasks or unacknowledged events.
    public func sessions() async throws -> [API.Session] {
        try await call("GET", "/sessions")
    }

    /// Tells the daemon this client has every event of `session` up to `eventID`; the daemon
    /// deletes them and a later attach starts after them.
    public func acknowledge(session: String, through eventID: Int64) async throws {
        try DownloadRequest.validateSession(session)
        let _: API.Acknowledgement = try await call(
            "POST",
            "/sessions/\(session)/ack",
            body: API.Acknowledgement(through: eventID)
        )
    }

    /// The logged events of a session not yet acknowledged (or those after `after`), oldest
    /// first, without waiting for more and without acknowledging them.
    public func loggedEvents(session: String, after: Int64? = nil) async throws -> [EventRecord] {
        try DownloadRequest.validateSession(session)
        return try await call("GET", "/sessions/\(session)/log" + (after.map { "?after=\($0)" } ?? ""))
    }

    /// Stops the daemon cleanly (running downloads checkpoint and continue at its next start).
    public func stopDaemon() async throws {
        let _: API.Stopping = try await call("POST", "/shutdown")
    }

    /// In a fleet: asks node `node` to drain — take no new download, hand back what it runs
    /// at a checkpoint (or, `finishing`, let it finish), then stop.
    @discardableResult
    public func drain(node: String, finishing: Bool = false) async throws -> API.Drain {
        let path = "/fleet/nodes/" + (node.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")
        return try await call("POST", path + "/drain", body: API.Drain(finishing: finishing))
    }

    // MARK: Events

    /// Attaches to a session: the events this session's clients have not acknowledged
    /// (what happened while nobody listened), then live ones, until the daemon stops.
    ///
    /// The consumer is done with an event when it asks for the next one; the latest event
    /// it is done with is acknowledged in the background, at most once a second, and
    /// once more when the stream ends, so an event is delivered again only if the consumer
    /// never finished with it, or finished it just before it stopped or crashed. Call
    /// ``acknowledge(session:through:)`` for the last one when stopping early.
    /// - Parameters:
    ///   - after: start after this event id instead of after the last acknowledged one
    ///     (nothing is acknowledged by it).
    ///   - pauseOnDisconnect: when this client goes away (exits, is killed), the daemon
    ///     pauses the session's tasks, keeping their data.
    public func attach(session: String, after: Int64? = nil, pauseOnDisconnect: Bool = false) -> SessionEvents {
        let query = (after.map { ["after=\($0)"] } ?? []) + (pauseOnDisconnect ? ["pauseOnDisconnect=true"] : [])
        let path = "/sessions/\(session)/events" + (query.isEmpty ? "" : "?" + query.joined(separator: "&"))
        return SessionEvents(client: self, session: session, path: path, acknowledges: after == nil)
    }

    /// Live events from now on (with progress), of one session or all; nothing is acknowledged.
    public func liveEvents(session: String? = nil) -> SessionEvents {
        let path = session.map { "/sessions/\($0)/events?live=true" } ?? "/events"
        return SessionEvents(client: self, session: session, path: path, acknowledges: false)
    }

    /// Opens an event stream and feeds its events, a network read at a time, until it ends.
    func stream(
        _ path: String,
        into continuation: AsyncThrowingStream<[StreamedEvent], any Error>.Continuation
    ) async {
        do {
            var request = try makeRequest("GET", path)
            request.headers.add(name: "Accept", value: "text/event-stream")
            let response = try await http.execute(request, deadline: .distantFuture)
            guard response.status == .ok else {
                let body = try await response.body.collect(upTo: 1 << 20)
                throw try HaulClient.failure(response, body: body)
            }
            var parser = ServerSentEvents.Parser()
            for try await buffer in response.body {
                let (events, failure) = StreamedEvent.events(parser.feed(buffer.readableBytesView))
                if !events.isEmpty { continuation.yield(events) }
                if let failure { throw failure }
                if parser.isOverlong { throw StreamedEvent.overlong(from: base) }
            }
            continuation.finish()
        } catch {
            continuation.finish(throwing: HaulClient.connectionError(error, base: base))
        }
    }

    // MARK: Plumbing

    private struct Empty: Encodable {}

    private func call<Response: Decodable>(
        _ method: String,
        _ path: String,
        timeout: Duration = .seconds(600)
    ) async throws -> Response {
        try await call(method, path, body: Optional<Empty>.none, timeout: timeout)
    }

    private func call<Body: Encodable, Response: Decodable>(
        _ method: String,
        _ path: String,
        body: Body?,
        timeout: Duration = .seconds(600)
    ) async throws -> Response {
        try await call(
            method,
            path,
            bytes: try body.map { ByteBuffer(bytes: try HaulJSON.encoder().encode($0)) },
            timeout: timeout
        )
    }

    /// A call whose JSON body, if any, is encoded already.
    private func call<Response: Decodable>(
        _ method: String,
        _ path: String,
        bytes body: ByteBuffer?,
        timeout: Duration = .seconds(600)
    ) async throws -> Response {
        try HaulClient.decode(try await answer(method, path, bytes: body, timeout: timeout), of: method, path)
    }

    /// A successful call's answer, not yet decoded.
    private func answer(
        _ method: String,
        _ path: String,
        bytes body: ByteBuffer?,
        timeout: Duration = .seconds(600)
    ) async throws -> ByteBuffer {
        var request = try makeRequest(method, path)
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(body)
        }
        let response: HTTPClientResponse
        let data: ByteBuffer
        do {
            response = try await http.execute(request, timeout: .milliseconds(Int64(timeout / .milliseconds(1))))
            data = try await response.body.collect(upTo: 256 << 20)
        } catch {
            throw HaulClient.connectionError(error, base: base, waited: timeout)
        }
        guard response.status == .ok else { throw try HaulClient.failure(response, body: data) }
        return data
    }

    static func decode<Response: Decodable>(
        _ data: ByteBuffer,
        of method: String,
        _ path: String
    ) throws -> Response {
        do {
            return try HaulJSON.decoder.decode(Response.self, from: Data(buffer: data))
        } catch {
            throw HaulError(.invalidResponse, "The daemon's answer to \(method) \(path) could not be read: \(error)")
        }
    }

    private func makeRequest(_ method: String, _ path: String) throws -> HTTPClientRequest {
        var request = HTTPClientRequest(url: base + API.prefix + path)
        request.method = HTTPMethod(rawValue: method)
        if let token { request.headers.add(name: "Authorization", value: "Bearer \(token)") }
        return request
    }

    private static func failure(_ response: HTTPClientResponse, body: ByteBuffer) throws -> HaulError {
        if let failure = try? HaulJSON.decoder.decode(API.Failure.self, from: Data(buffer: body)) {
            // The daemon's line already says what and why; keep its code.
            var error = HaulError(HaulError.Code(name: failure.code) ?? .invalidArgument, failure.error)
            error.status = Int(response.status.code)
            return error
        }
        return HaulError(
            .invalidResponse,
            "The daemon answered \(response.status.code) \(response.status.reasonPhrase)"
        )
    }

    /// - Parameter waited: how long the call waited for its answer, when it had a bound: a
    ///   daemon that did not answer in time is running (busy), not unreachable.
    static func connectionError(_ error: any Error, base: String, waited: Duration? = nil) -> HaulError {
        if let error = error as? HaulError { return error }
        let place = base.removingPercentEncoding ?? base
        if let waited, let error = error as? HTTPClientError, error == .deadlineExceeded || error == .readTimeout {
            return HaulError(
                .connection,
                "The Haul daemon (\(place)) did not answer within \(waited.components.seconds) s",
                hint: "It is running but busy; try again in a moment"
            )
        }
        // The system's reason when there is one ("Connection refused"), never a type's name.
        let reason = (error as? IOError).map { String(cString: strerror($0.errnoCode)) }
        return HaulError(
            .connection,
            "Cannot reach the Haul daemon (\(place))" + (reason.map { ": \($0)" } ?? ""),
            hint: "Start it with 'haul daemon'"
        )
    }
}
