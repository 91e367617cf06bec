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
    /// Paths that check their callers themselves (aria2's `/jsonrpc`).
    var exempt: Set<String> = []

    func handle(
        _ request: Request,
        context: Context,
        next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        if exempt.contains(request.uri.path) { return try await next(request, context) }
        let given = request.headers[.authorization] ?? ""
        guard Secret.matches(given, "Bearer " + token) else {
            return APIFailure.response(
                API.Failure(error: "A valid token is required (Authorization: Bearer …)", code: "unauthorized"),
                status: .unauthorized
            )
        }
        return try await next(request, context)
    }

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
        let allowed = endpoints.filter { endpoint in
            endpoint.segments.count == path.count
                && zip(endpoint.segments, path).allSatisfy { $0.hasPrefix(":") || $0 == $1 }
        }.map(\.method)
        guard !allowed.isEmpty else {
            return APIFailure.response(
                API.Failure(
                    error: "No such endpoint: \(request.method) \(request.uri.path); the README lists the API",
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
