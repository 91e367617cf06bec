import Foundation
import HTTPTypes
import Haul
import HaulWire
import HaulWireMapping
import Hummingbird
import Prometheus

extension HTTPField.Name {
    static let lastEventID = HTTPField.Name("Last-Event-ID")!
}

/// The daemon's HTTP+JSON API, `/v1`, as route collections over a ``DaemonCore``: tasks
/// (``TaskRoutes``), sessions and their event logs (``SessionRoutes``), and the daemon
/// itself (``DaemonRoutes``). Every endpoint is documented in docs/daemon.md.
///
/// Handlers return values (encoded as JSON by ``APIContext``) or throw; a ``HaulError``
/// answers with its status and sentence, anything else through ``APIErrorMiddleware``.
enum Routes {
    static func router(
        core: DaemonCore,
        token: String?,
        rpc: Aria2RPC? = nil,
        metrics: PrometheusCollectorRegistry? = nil
    ) -> Router<APIContext> {
        let router = Router(context: APIContext.self)
        router.add(middleware: MemoryReturnMiddleware())
        if let token {
            // aria2's clients carry their secret in each call (Aria2RPC), not in a header; the
            // dashboard's page holds no data, what it shows needs its login.
            let exempt = DashboardRoutes.publicPaths.union(rpc == nil ? [] : ["/jsonrpc"])
            router.add(middleware: TokenMiddleware(token: token, exempt: exempt, logins: core.logins))
            // A browser reaches the daemon over TCP only.
            DashboardRoutes(logins: core.logins).register(on: router)
        }
        if let rpc { Aria2Routes(rpc: rpc).register(on: router) }
        if let metrics { MetricsRoutes(core: core, registry: metrics).register(on: router) }
        let v1 = v1Routes(core: core)
        router.add(middleware: APIErrorMiddleware(endpoints: v1.endpoints))
        router.addRoutes(v1.collection, atPath: "/v1")
        return router
    }
}

extension Routes {
    /// The `/v1` API's endpoints (also what the OpenAPI document must describe).
    static func v1Routes(core: DaemonCore) -> APIRoutes {
        let v1 = APIRoutes(prefix: "v1")
        TaskRoutes(core: core).register(on: v1)
        SessionRoutes(core: core).register(on: v1)
        DaemonRoutes(core: core).register(on: v1)
        return v1
    }
}

/// A route collection that records its endpoints as they are registered, so the API can
/// tell an unknown path (404) from a known one asked with another method (405 with `Allow`).
final class APIRoutes {
    let collection = RouteCollection(context: APIContext.self)
    let prefix: String
    /// Method and path pattern of each endpoint (`:name` matches one segment).
    private(set) var endpoints: [(method: HTTPRequest.Method, segments: [Substring])] = []

    init(prefix: String) {
        self.prefix = prefix
    }

    private func on<Output: ResponseGenerator>(
        _ method: HTTPRequest.Method,
        _ path: String,
        _ handler: @escaping @Sendable (Request, APIContext) async throws -> Output
    ) {
        endpoints.append((method, (prefix + "/" + path).split(separator: "/")))
        collection.on(RouterPath(path), method: method, use: handler)
    }

    func get<Output: ResponseGenerator>(
        _ path: String,
        use handler: @escaping @Sendable (Request, APIContext) async throws -> Output
    ) { on(.get, path, handler) }

    func post<Output: ResponseGenerator>(
        _ path: String,
        use handler: @escaping @Sendable (Request, APIContext) async throws -> Output
    ) { on(.post, path, handler) }

    func put<Output: ResponseGenerator>(
        _ path: String,
        use handler: @escaping @Sendable (Request, APIContext) async throws -> Output
    ) { on(.put, path, handler) }
}

/// `/v1/tasks…`: list, add, look at, limit and stop downloads.
struct TaskRoutes {
    let core: DaemonCore
    /// The daemon's `SSL_CERT_FILE` and `SSL_CERT_DIR`, read once.
    static let environmentTLS = TLSOptions.fromEnvironment()
    /// The daemon's `http_proxy`, `https_proxy`, `all_proxy` and `no_proxy`, read once.
    static let environmentProxy = ProxySettings.fromEnvironment()

    func register(on routes: APIRoutes) {
        routes.get("tasks") { request, _ in
            let session = request.uri.queryParameters.get("session").map { String($0) }
            if let session { try DownloadRequest.validateSession(session) }
            let page = try Self.page(request.uri.queryParameters)
            return try await core.manager.tasks(session: session, page: page).map(API.Task.init)
        }
        routes.post("tasks") { request, context in
            let body = try await RequestBody.decode(API.AddRequest.self, from: request, context: context)
            guard !body.downloads.isEmpty else {
                throw HaulError(.invalidArgument, "downloads is empty: give at least one download")
            }
            // All or nothing: every download is checked before any is added; each directory once.
            var directories: [String: String] = [:]
            var checkedDirectories: Set<String> = []
            let requests = try body.downloads.enumerated().map { index, download in
                do {
                    var request = try download.request(directories: &directories)
                    // Without its own, a download trusts what the daemon's environment says.
                    if download.tls == nil { request.tls = TaskRoutes.environmentTLS }
                    if download.proxy == nil { request.proxy = TaskRoutes.environmentProxy }
                    try request.validate(checkedDirectories: &checkedDirectories)
                    return request
                } catch var error as HaulError {
                    error.message = "downloads[\(index)]: \(error.message)"
                    throw error
                }
            }
            let added = try await core.manager.download(requests, priority: body.priority ?? 0).map(API.Task.init)
            if requests.count >= 1_000 { ProcessMemory.returnFreedMemory() }
            return added
        }
        routes.get("tasks/:id") { _, context in
            API.Task(try await core.manager.info(try Self.taskID(context)))
        }
        routes.post("tasks/rate-limit") { request, context in
            let body = try await RequestBody.decode(API.RateLimitChange.self, from: request, context: context)
            return try await core.setRateLimit(body.bytesPerSecond, for: body.tasks).map(API.Task.init)
        }
        for operation in TaskOperation.allCases {
            routes.post("tasks/\(operation.rawValue)") { request, context in
                let selector = try await RequestBody.decode(API.Selector.self, from: request, context: context)
                return try await core.apply(operation, to: selector).map(API.Task.init)
            }
        }
    }

    /// The page `limit` and `after` ask for (``TaskPage``); nil when neither is given: every task.
    static func page(_ query: Hummingbird.Parameters) throws -> TaskPage? {
        let (limit, after) = (query.get("limit"), query.get("after"))
        let count = try limit.map { text in
            guard let count = Int(text), (1...TaskPage.maxLimit).contains(count) else {
                throw HaulError(.invalidArgument, "limit takes a number of tasks from 1 to \(TaskPage.maxLimit)")
            }
            return count
        }
        let id = try after.map { text in
            guard let id = UUID(uuidString: String(text)) else {
                throw HaulError(.invalidArgument, "after takes a task's id, as the last page listed it")
            }
            return id
        }
        return try TaskPage.asked(limit: count, after: id)
    }

    static func taskID(_ context: APIContext) throws -> UUID {
        let text = try context.parameters.require("id")
        guard let id = UUID(uuidString: text) else { throw HaulError(.invalidArgument, "Invalid task id '\(text)'") }
        return id
    }
}

/// `/v1/sessions…` and `/v1/events`: sessions, their event logs, acknowledgements, and the
/// live event streams.
struct SessionRoutes {
    let core: DaemonCore

    func register(on routes: APIRoutes) {
        routes.get("sessions") { _, _ in try await core.sessions() }
        routes.post("sessions/:name/ack") { request, context in
            let session = try Self.sessionName(context)
            let body = try await RequestBody.decode(API.Acknowledgement.self, from: request, context: context)
            try await core.acknowledge(session: session, through: body.through)
            return body
        }
        routes.get("sessions/:name/log") { request, context in
            let session = try Self.sessionName(context)
            let after: Int64
            if let given = try Self.eventID(request, "after") {
                after = given
            } else {
                after = try await core.acknowledgedEventID(session: session)
            }
            return try await core.loggedEvents(session: session, after: after, limit: 10_000)
        }
        routes.get("sessions/:name/events") { request, context in
            let session = try Self.sessionName(context)
            let query = request.uri.queryParameters
            let after: Int64
            if let acknowledged = try Self.eventID(request, "Last-Event-ID") {
                // The client has everything up to this id: an acknowledgement.
                try await core.acknowledge(session: session, through: acknowledged)
                after = acknowledged
            } else if let given = try Self.eventID(request, "after") {
                after = given
            } else if query.get("live") == "true" {
                after = try await core.lastEventID()
            } else {
                after = try await core.acknowledgedEventID(session: session)
            }
            return EventStream(
                core: core,
                session: session,
                after: after,
                pauseOnDisconnect: query.get("pauseOnDisconnect") == "true"
            ).response()
        }
        routes.get("events") { request, _ in
            var after = try Self.eventID(request, "after")
            if after == nil { after = try await core.lastEventID() }
            return EventStream(core: core, session: nil, after: after ?? 0, pauseOnDisconnect: false).response()
        }
    }

    /// An event id from the `after` query parameter or the `Last-Event-ID` header; nil when absent.
    static func eventID(_ request: Request, _ name: String) throws -> Int64? {
        let value: String? =
            name == "after"
            ? request.uri.queryParameters.get("after").map { String($0) } : request.headers[.lastEventID]
        guard let value else { return nil }
        guard let id = Int64(value), id >= 0 else {
            throw HaulError(.invalidArgument, "Invalid event id '\(value)' in \(name)")
        }
        return id
    }

    static func sessionName(_ context: APIContext) throws -> String {
        let name = try context.parameters.require("name")
        try DownloadRequest.validateSession(name)
        return name
    }
}

/// `/v1/status`, `/v1/settings`, `/v1/shutdown`, `/v1/fleet/nodes/{name}/drain`,
/// `/v1/login-links` and `/v1/openapi.json`: the daemon itself (and its fleet's nodes).
struct DaemonRoutes {
    let core: DaemonCore

    func register(on routes: APIRoutes) {
        routes.get("status") { _, _ in try await core.status() }
        routes.get("health") { _, _ in API.Health(pid: getpid(), version: HaulVersion.current, listen: core.listen) }
        routes.get("settings") { request, _ in try await core.settings(node: try Self.node(request)) }
        routes.put("settings") { request, context in
            let body = try await RequestBody.decode(API.Settings.self, from: request, context: context)
            let node = try Self.node(request)
            try await core.changeLimits(
                StoredLimits(
                    maxConcurrentDownloads: body.maxConcurrentDownloads,
                    maxDownloadsPerHost: body.maxDownloadsPerHost,
                    maxConnectionsPerHost: body.maxConnectionsPerHost,
                    overallRateLimit: body.overallRateLimit,
                    giveUpAfter: body.giveUpAfter,
                    allowMetered: body.allowMetered.map { $0 ? 1 : 0 },
                    lowestSpeedLimit: body.lowestSpeedLimit,
                    lowestSpeedTime: body.lowestSpeedTime
                ),
                meteredInterfaces: body.meteredInterfaces,
                node: node,
                caps: body.fleet
            )
            return try await core.settings(node: node)
        }
        routes.post("fleet/nodes/:name/drain") { request, context in
            let body = try await RequestBody.decode(API.Drain.self, from: request, context: context)
            let node = try context.parameters.require("name")
            return try await core.drain.request(node, finishing: body.finishing ?? false, core: core)
        }
        routes.post("login-links") { _, _ in
            guard let listen = core.listen else {
                throw HaulError(
                    .busy,
                    "The daemon has no TCP listener for a browser to reach",
                    hint:
                        "Restart it with one: haul daemon stop && haul daemon --listen 127.0.0.1:7800 (its downloads continue where they were)"
                )
            }
            let link = core.logins.issueLink()
            return API.LoginLink(
                url: "http://\(Self.browserAddress(listen))/#login=\(link.code)",
                expiresAt: link.expires
            )
        }
        routes.get("openapi.json") { _, _ in
            guard let file = EmbeddedAssets.file("openapi.json") else {
                throw HaulError(.store, "This build of the daemon lacks its OpenAPI document")
            }
            return Response(status: .ok, headers: [.contentType: file.contentType], body: .init(byteBuffer: file.body))
        }
        routes.post("shutdown") { _, _ in
            Task {
                // Answer first, then stop.
                try? await Task.sleep(for: .milliseconds(20))
                await core.requestShutdown()
            }
            return API.Stopping(stopping: true)
        }
    }

    /// The `node` query parameter (a fleet's node whose own limits to read or change), checked.
    static func node(_ request: Request) throws -> String? {
        guard let node = request.uri.queryParameters.get("node").map({ String($0) }) else { return nil }
        try DownloadRequest.validateNodeName(node)
        return node
    }

    /// The listener's `HOST:PORT` as a browser on this machine reaches it: a wildcard
    /// address becomes loopback, an IPv6 address goes in brackets.
    static func browserAddress(_ listen: String) -> String {
        guard let colon = listen.lastIndex(of: ":") else { return listen }
        var host = String(listen[..<colon])
        let port = listen[listen.index(after: colon)...]
        if host == "0.0.0.0" || host.isEmpty { host = "127.0.0.1" }
        if host == "::" { host = "::1" }
        if host.contains(":") && !host.hasPrefix("[") { host = "[\(host)]" }
        return "\(host):\(port)"
    }
}
