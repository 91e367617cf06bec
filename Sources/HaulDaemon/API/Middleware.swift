import Foundation
import HTTPTypes
import Haul
import HaulWire
import HaulWireMapping
import Hummingbird
import Logging
import NIOCore

/// Requires `Authorization: Bearer TOKEN` on every request (the TCP listener), or the
/// dashboard's session in `X-Haul-Session` (``DashboardLogins``). Both are headers, which a
/// browser never adds on its own: a page of another origin (another port included) can
/// neither read the session nor send it. Cookies are not looked at.
struct TokenMiddleware<Context: RequestContext>: RouterMiddleware {
    let token: String
    /// Paths that check their callers themselves (aria2's `/jsonrpc`) or hold no data (the
    /// dashboard's page).
    var exempt: Set<String> = []
    /// The dashboard's sessions, when it is served.
    var logins: DashboardLogins? = nil

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        if exempt.contains(request.uri.path) { return try await next(request, context) }
        let given = request.headers[.authorization] ?? ""
        if Secret.matches(given, "Bearer " + token) { return try await next(request, context) }
        if let logins, let session = request.headers[.haulSession], logins.isSession(session) {
            return try await next(request, context)
        }
        return APIFailure.response(
            API.Failure(error: "A valid token is required (Authorization: Bearer …)", code: "unauthorized"),
            status: .unauthorized
        )
    }
}

extension HTTPField.Name {
    /// The dashboard's session (``DashboardLogins``).
    static let haulSession = HTTPField.Name(DashboardLogins.headerName)!
}

/// Compares a secret someone gave with the one expected, in time that does not depend on
/// where they differ (the API's token, aria2's `token:` parameter).
enum Secret {
    static func matches(_ a: String, _ b: String) -> Bool {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(UInt8(0)) { $0 | ($1.0 ^ $1.1) } == 0
    }
}

/// Answers every failure as the API's JSON: a request no route takes with 405 and `Allow`
/// when the path exists for other methods, else 404; a thrown error with its own status
/// (``HaulError``, ``BodyTooLarge``) or, for anything else, 500 in one sentence.
struct APIErrorMiddleware<Context: RequestContext>: RouterMiddleware {
    let endpoints: [(method: HTTPRequest.Method, segments: [Substring])]

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        do {
            return try await next(request, context)
        } catch let error as HTTPError where error.status == .notFound {
            return unknownEndpoint(request)
        } catch {
            return APIFailure.response(for: error, request: request, context: context)
        }
    }

    private func unknownEndpoint(_ request: Request) -> Response {
        let path = request.uri.path.split(separator: "/")
        let matching = endpoints.filter { endpoint in
            endpoint.segments.count == path.count
                && zip(endpoint.segments, path).allSatisfy { $0.hasPrefix(":") || $0 == $1 }
        }
        // The most literal patterns only, as the router picks them: `/v1/tasks/pause` is
        // the pause endpoint's path (POST), not a task id for `GET /v1/tasks/:id`.
        let literal = { (endpoint: (method: HTTPRequest.Method, segments: [Substring])) in
            endpoint.segments.filter { !$0.hasPrefix(":") }.count
        }
        let mostLiteral = matching.map(literal).max()
        let allowed = matching.filter { literal($0) == mostLiteral }.map(\.method)
        guard !allowed.isEmpty else {
            return APIFailure.response(
                API.Failure(
                    error:
                        "No such endpoint: \(request.method) \(request.uri.path); docs/daemon.md lists the API (GET /v1/openapi.json describes it)",
                    code: "notFound"
                ),
                status: .notFound
            )
        }
        let names = Set(allowed.map(\.rawValue)).sorted()
        var response = APIFailure.response(
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

/// Once a large response is written (a long listing: its tasks read, encoded and sent), the
/// C allocator's free pages go back to the system (``ProcessMemory/returnFreedMemory()``):
/// a daemon that listed 100,000 tasks kept 175 MB for a live heap of a tenth of it.
struct MemoryReturnMiddleware<Context: RequestContext>: RouterMiddleware {
    /// Responses from this size on.
    static var largeResponse: Int { 1 << 20 }

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        var response = try await next(request, context)
        guard let length = response.body.contentLength, length >= Self.largeResponse else { return response }
        let body = response.body
        response.body = ResponseBody(contentLength: length) { writer in
            try await body.write(writer)
            ProcessMemory.returnFreedMemory()
        }
        return response
    }
}
