import Foundation
import HTTPTypes
import HaulWire
import HaulWireMapping
import Hummingbird
import NIOCore
import NIOFoundationCompat

/// The web dashboard on the TCP listener: its page and files at `/`, open to anyone (they
/// hold no data), and `POST /login`, which spends a one-time code from `haul ui` and answers
/// with a session for the page to keep. The link `haul ui` gives carries the code in its
/// fragment (`/#login=CODE`), which a browser never sends to a server nor puts in a
/// `Referer`; the page posts it here. Everything the page shows comes from `/v1`, which
/// needs that session in `X-Haul-Session` (or the token).
struct DashboardRoutes {
    let logins: DashboardLogins

    /// The paths that answer without a token or a session.
    static let publicPaths: Set<String> = ["/", "/login", "/dashboard.js", "/dashboard.css", "/favicon.svg"]

    /// What the page may load and where it may connect: only the daemon itself.
    static let contentSecurityPolicy =
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        + "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

    func register(on router: Router<APIContext>) {
        router.get("/") { _, _ in Self.asset("index.html") }
        for name in ["dashboard.js", "dashboard.css", "favicon.svg"] {
            router.get(RouterPath(name)) { _, _ in Self.asset(name) }
        }
        router.post("/login") { request, _ in
            var request = request
            let body = try? await request.collectBody(upTo: 1024)
            let login = body.flatMap { try? JSONDecoder().decode(Login.self, from: Data(buffer: $0)) }
            guard let login, let session = logins.redeem(login.code) else {
                return APIFailure.response(
                    API.Failure(
                        error: "This login link has expired or was used; run haul ui again for a new one",
                        code: "unauthorized"
                    ),
                    status: .unauthorized
                )
            }
            var response = Response(
                status: .ok,
                headers: [.contentType: "application/json", .cacheControl: "no-store"],
                body: .init(byteBuffer: ByteBuffer(data: try JSONEncoder().encode(Session(session: session))))
            )
            response.headers[.referrerPolicy] = "no-referrer"
            return response
        }
    }

    /// `POST /login`'s body: the code from the link's fragment.
    private struct Login: Decodable {
        var code: String
    }

    /// `POST /login`'s answer: the session the page sends as `X-Haul-Session`.
    private struct Session: Encodable {
        var session: String
    }

    static func asset(_ name: String) -> Response {
        guard let file = EmbeddedAssets.file(name) else { return Response(status: .notFound) }
        var response = Response(status: .ok, headers: securityHeaders, body: .init(byteBuffer: file.body))
        response.headers[.contentType] = file.contentType
        response.headers[.cacheControl] = "no-cache"
        return response
    }

    static let securityHeaders: HTTPFields = [
        .contentSecurityPolicy: contentSecurityPolicy,
        .xContentTypeOptions: "nosniff",
        .referrerPolicy: "no-referrer",
    ]

    /// A small HTML page with a title and a sentence (escaped).
    static func page(status: HTTPResponse.Status, title: String, text: String) -> Response {
        func escape(_ text: String) -> String {
            text.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
                .replacingOccurrences(of: ">", with: "&gt;")
        }
        let html = """
            <!doctype html><html lang="en"><head><meta charset="utf-8">\
            <meta name="viewport" content="width=device-width, initial-scale=1">\
            <title>Haul — \(escape(title))</title><link rel="stylesheet" href="/dashboard.css"></head>\
            <body><main class="notice"><h1>\(escape(title))</h1><p>\(escape(text))</p></main></body></html>
            """
        var response = Response(
            status: status,
            headers: securityHeaders,
            body: .init(byteBuffer: ByteBuffer(string: html))
        )
        response.headers[.contentType] = "text/html; charset=utf-8"
        response.headers[.cacheControl] = "no-store"
        return response
    }
}

extension HTTPField.Name {
    static let referrerPolicy = HTTPField.Name("Referrer-Policy")!
}
