import Foundation
import HTTPTypes
import Haul
import HaulWire
import Hummingbird
import Logging
import NIOCore

extension HTTPField.Name {
    static let lastEventID = HTTPField.Name("Last-Event-ID")!
}

/// The daemon's HTTP+JSON API. Every endpoint is documented in the README.
enum Routes {
    static func router(core: DaemonCore, token: String?) -> Router<BasicRequestContext> {
        let router = Router()
        if let token { router.add(middleware: TokenMiddleware(token: token)) }
        let endpoints = Endpoints()
        let api = EndpointGroup(group: router.group("v1"), endpoints: endpoints, prefix: "v1")

        api.get("status") { _, _ in await respond { try await core.status() } }

        api.get("tasks") { request, _ in
            await respond {
                let session = request.uri.queryParameters.get("session").map { String($0) }
                if let session { try DownloadRequest.validateSession(session) }
                return try await core.manager.tasks(session: session)
            }
        }
        api.post("tasks") { request, context in
            await respond {
                let body = try await decode(API.AddRequest.self, from: request, context: context)
                guard !body.downloads.isEmpty else {
                    throw HaulError(.invalidArgument, "downloads is empty: give at least one download")
                }
                // All or nothing: every download is checked before any is added.
                let requests = try body.downloads.enumerated().map { index, download in
                    do {
                        let request = try download.request()
                        try request.validate()
                        return request
                    } catch var error as HaulError {
                        error.message = "downloads[\(index)]: \(error.message)"
                        throw error
                    }
                }
                return try await core.manager.download(requests, priority: body.priority ?? 0)
            }
        }
        api.get("tasks/:id") { _, context in
            await respond { try await core.manager.info(try taskID(context)) }
        }
        api.post("tasks/rate-limit") { request, context in
            await respond {
                let body = try await decode(API.RateLimitChange.self, from: request, context: context)
                return try await core.setRateLimit(body.bytesPerSecond, for: body.tasks)
            }
        }
        for operation in TaskOperation.allCases {
            api.post("tasks/\(operation.rawValue)") { request, context in
                await respond {
                    let selector = try await decode(API.Selector.self, from: request, context: context)
                    return try await core.apply(operation, to: selector)
                }
            }
        }

        api.get("settings") { _, _ in await respond { await settings(core) } }
        api.put("settings") { request, context in
            await respond {
                let body = try await decode(API.Settings.self, from: request, context: context)
                try await core.changeLimits(
                    StoredLimits(
                        maxConcurrentDownloads: body.maxConcurrentDownloads,
                        maxConnectionsPerHost: body.maxConnectionsPerHost,
                        overallRateLimit: body.overallRateLimit
                    )
                )
                return await settings(core)
            }
        }

        api.get("sessions") { _, _ in
            await respond {
                try await core.manager.store.sessionSummaries().map {
                    API.Session(name: $0.name, tasks: $0.tasks, pendingEvents: $0.pendingEvents)
                }
            }
        }
        api.post("sessions/:name/ack") { request, context in
            await respond {
                let session = try sessionName(context)
                let body = try await decode(API.Acknowledgement.self, from: request, context: context)
                try await core.acknowledge(session: session, through: body.through)
                return body
            }
        }
        api.get("sessions/:name/log") { request, context in
            await respond {
                let session = try sessionName(context)
                let after: Int64
                if let given = try eventID(request, "after") {
                    after = given
                } else {
                    after = try await core.manager.store.acknowledgedEventID(session: session)
                }
                return try await core.manager.store.loggedEvents(session: session, after: after, limit: 10_000)
            }
        }
        api.get("sessions/:name/events") { request, context in
            do {
                let session = try sessionName(context)
                let query = request.uri.queryParameters
                let after: Int64
                if let acknowledged = try eventID(request, "Last-Event-ID") {
                    // The client has everything up to this id: an acknowledgement.
                    try await core.acknowledge(session: session, through: acknowledged)
                    after = acknowledged
                } else if let given = try eventID(request, "after") {
                    after = given
                } else if query.get("live") == "true" {
                    after = try await core.manager.store.lastEventID()
                } else {
                    after = try await core.manager.store.acknowledgedEventID(session: session)
                }
                return EventStream(
                    core: core,
                    session: session,
                    after: after,
                    pauseOnDisconnect: query.get("pauseOnDisconnect") == "true"
                ).response()
            } catch {
                return failure(error)
            }
        }
        api.get("events") { request, _ in
            do {
                let after: Int64
                if let given = try eventID(request, "after") {
                    after = given
                } else {
                    after = try await core.manager.store.lastEventID()
                }
                return EventStream(core: core, session: nil, after: after, pauseOnDisconnect: false).response()
            } catch {
                return failure(error)
            }
        }

        api.post("shutdown") { _, _ in
            Task {
                // Answer first, then stop.
                try? await Task.sleep(for: .milliseconds(20))
                await core.requestShutdown()
            }
            return await respond { API.Stopping(stopping: true) }
        }
        router.add(middleware: UnknownEndpointMiddleware(endpoints: endpoints.all))
        return router
    }

    private static func settings(_ core: DaemonCore) async -> API.Settings {
        let limits = await core.manager.limits
        return API.Settings(
            maxConcurrentDownloads: limits.maxConcurrentDownloads,
            maxConnectionsPerHost: limits.maxConnectionsPerHost,
            overallRateLimit: core.manager.overallRateLimit ?? 0
        )
    }

    /// An event id from the `after` query parameter or the `Last-Event-ID` header; nil when absent.
    private static func eventID(_ request: Request, _ name: String) throws -> Int64? {
        let value: String? =
            name == "after"
            ? request.uri.queryParameters.get("after").map { String($0) } : request.headers[.lastEventID]
        guard let value else { return nil }
        guard let id = Int64(value), id >= 0 else {
            throw HaulError(.invalidArgument, "Invalid event id '\(value)' in \(name)")
        }
        return id
    }

    private static func taskID(_ context: BasicRequestContext) throws -> UUID {
        let text = context.parameters.get("id") ?? ""
        guard let id = UUID(uuidString: text) else { throw HaulError(.invalidArgument, "Invalid task id '\(text)'") }
        return id
    }

    private static func sessionName(_ context: BasicRequestContext) throws -> String {
        let name = context.parameters.get("name") ?? ""
        try DownloadRequest.validateSession(name)
        return name
    }

    /// The largest request body the API reads (16 MiB: about 50,000 downloads in one add).
    static let maxBodySize = 16 << 20

    /// A request body over ``maxBodySize``: answered with 413.
    struct BodyTooLarge: Error {}

    private static func decode<T: Decodable>(
        _ type: T.Type,
        from request: Request,
        context: BasicRequestContext
    ) async throws -> T {
        var request = request
        let body: ByteBuffer
        do {
            body = try await request.collectBody(upTo: maxBodySize)
        } catch is NIOTooManyBytesError {
            throw BodyTooLarge()
        }
        let data = Data(buffer: body)
        let value: T
        do {
            value = try HaulJSON.decoder.decode(T.self, from: data)
        } catch let error as DecodingError {
            throw HaulError(.invalidArgument, "Invalid request body: \(describe(error))")
        } catch {
            throw HaulError(.invalidArgument, "Invalid request body: it is not JSON")
        }
        if let unknown = unknownField(in: data, decodedAs: value) {
            // A misspelt field would otherwise be ignored without a word.
            throw HaulError(.invalidArgument, "Invalid request body: field '\(unknown)' is not one the API knows")
        }
        return value
    }

    /// The first field of `data` that decoding `T` did not use, found by encoding what was
    /// decoded and looking for each given field (other than null ones) in the result.
    static func unknownField<T: Decodable>(in data: Data, decodedAs value: T) -> String? {
        guard let encodable = value as? any Encodable,
            let encoded = try? HaulJSON.encoder().encode(encodable),
            let given = try? JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]),
            let used = try? JSONSerialization.jsonObject(with: encoded, options: [.fragmentsAllowed])
        else { return nil }
        func walk(_ given: Any, _ used: Any, _ path: String) -> String? {
            if let given = given as? [String: Any] {
                let used = used as? [String: Any] ?? [:]
                for key in given.keys.sorted() where !(given[key] is NSNull) {
                    let field = path.isEmpty ? key : path + "." + key
                    guard let inner = used[key] else { return field }
                    if let unknown = walk(given[key]!, inner, field) { return unknown }
                }
            } else if let given = given as? [Any], let used = used as? [Any] {
                for (index, element) in given.enumerated() where index < used.count {
                    if let unknown = walk(element, used[index], path + "[\(index)]") { return unknown }
                }
            }
            return nil
        }
        return walk(given, used, "")
    }

    /// A decoding failure as a sentence naming the field, e.g. `field 'downloads[0].url' is missing`.
    static func describe(_ error: DecodingError) -> String {
        func path(_ context: DecodingError.Context, _ last: (any CodingKey)? = nil) -> String {
            let keys = context.codingPath + (last.map { [$0] } ?? [])
            var text = ""
            for key in keys {
                if let index = key.intValue { text += "[\(index)]" } else { text += (text.isEmpty ? "" : ".") + key.stringValue }
            }
            return text.isEmpty ? "the body" : "field '\(text)'"
        }
        switch error {
        case .keyNotFound(let key, let context): return "\(path(context, key)) is missing"
        case .typeMismatch(let type, let context): return "\(path(context)) must be \(typeName(type))"
        case .valueNotFound(let type, let context): return "\(path(context)) must be \(typeName(type)), not null"
        case .dataCorrupted(let context):
            if context.codingPath.isEmpty { return "it is not valid JSON, or a number in it does not fit in 64 bits" }
            // Foundation's words for a string that is not a UUID.
            if context.debugDescription.contains("UUID") { return "\(path(context)) must be a task id (a UUID)" }
            return "\(path(context)) has an invalid value"
        @unknown default: return "it does not match the expected shape"
        }
    }

    private static func typeName(_ type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "true or false"
        case is Int.Type, is Int64.Type: "a whole number that fits in 64 bits"
        case is Array<Any>.Type: "an array"
        case is Dictionary<String, Any>.Type: "a JSON object"
        default: "a \(String(describing: type).lowercased())"
        }
    }

    /// Runs a handler and answers with its value as JSON, or with the error.
    private static func respond<T: Encodable>(_ body: () async throws -> T) async -> Response {
        do {
            return json(try await body(), status: .ok)
        } catch {
            return failure(error)
        }
    }

    static func json<T: Encodable>(_ value: T, status: HTTPResponse.Status) -> Response {
        let data = (try? HaulJSON.encoder().encode(value)) ?? Data("{}".utf8)
        return Response(
            status: status,
            headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(bytes: data))
        )
    }

    static func failure(_ error: any Error) -> Response {
        if error is BodyTooLarge {
            return json(
                API.Failure(
                    error: "The request body is larger than \(maxBodySize >> 20) MiB; send fewer downloads at once",
                    code: "tooLarge"
                ),
                status: .contentTooLarge
            )
        }
        let haul = error as? HaulError ?? HaulError(.store, "\(error)")
        let status: HTTPResponse.Status
        switch haul.code {
        case .busy, .destinationExists: status = .conflict
        case .store: status = .internalServerError
        case .notFound: status = .notFound
        default: status = .badRequest
        }
        return json(API.Failure(error: haul.description, code: haul.code.description), status: status)
    }
}
