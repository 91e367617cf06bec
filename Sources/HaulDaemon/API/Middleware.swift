import Foundation
import HTTPTypes
import Haul
import HaulWire
import Hummingbird
import Logging
import NIOCore

/// Requires `Authorization: Bearer TOKEN` on every request (the TCP listener).
struct TokenMiddleware<Context: RequestContext>: RouterMiddleware {
    let token: String

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        let given = request.headers[.authorization] ?? ""
        guard TokenMiddleware.constantTimeEqual(given, "Bearer " + token) else {
            return Routes.json(
                API.Failure(error: "A valid token is required (Authorization: Bearer …)", code: "unauthorized"),
                status: .unauthorized
            )
        }
        return try await next(request, context)
    }

    static func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

/// The API's endpoints as registered: method and path pattern (`:name` matches one segment).
final class Endpoints {
    // Filled while the router is built; the middleware gets a copy of the finished list.
    private(set) var all: [(method: HTTPRequest.Method, segments: [Substring])] = []

    func record(_ method: HTTPRequest.Method, _ path: String) {
        all.append((method, path.split(separator: "/")))
    }
}

/// Registers routes on a group and records them, so an unknown path or method can be told
/// apart (404 or 405 with `Allow`).
struct EndpointGroup {
    let group: RouterGroup<BasicRequestContext>
    let endpoints: Endpoints
    let prefix: String

    private func on<Output: ResponseGenerator>(
        _ method: HTTPRequest.Method,
        _ path: String,
        _ handler: @escaping @Sendable (Request, BasicRequestContext) async throws -> Output
    ) {
        endpoints.record(method, prefix + "/" + path)
        group.on(RouterPath(path), method: method, use: handler)
    }

    func get<Output: ResponseGenerator>(
        _ path: String,
        use handler: @escaping @Sendable (Request, BasicRequestContext) async throws -> Output
    ) { on(.get, path, handler) }

    func post<Output: ResponseGenerator>(
        _ path: String,
        use handler: @escaping @Sendable (Request, BasicRequestContext) async throws -> Output
    ) { on(.post, path, handler) }

    func put<Output: ResponseGenerator>(
        _ path: String,
        use handler: @escaping @Sendable (Request, BasicRequestContext) async throws -> Output
    ) { on(.put, path, handler) }
}

/// Answers requests no route takes with the API's JSON error: 405 with `Allow` when the path
/// exists for other methods, else 404.
struct UnknownEndpointMiddleware<Context: RequestContext>: RouterMiddleware {
    let endpoints: [(method: HTTPRequest.Method, segments: [Substring])]

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            let path = request.uri.path.split(separator: "/")
            let allowed = endpoints.filter { endpoint in
                endpoint.segments.count == path.count
                    && zip(endpoint.segments, path).allSatisfy { $0.hasPrefix(":") || $0 == $1 }
            }.map(\.method)
            guard !allowed.isEmpty else {
                return Routes.json(
                    API.Failure(
                        error: "No such endpoint: \(request.method) \(request.uri.path); the README lists the API",
                        code: "notFound"
                    ),
                    status: .notFound
                )
            }
            let names = Set(allowed.map(\.rawValue)).sorted()
            var response = Routes.json(
                API.Failure(
                    error: "\(request.uri.path) does not take \(request.method); it takes \(names.joined(separator: ", "))",
                    code: "methodNotAllowed"
                ),
                status: .methodNotAllowed
            )
            response.headers[.allow] = names.joined(separator: ", ")
            return response
        }
    }
}
