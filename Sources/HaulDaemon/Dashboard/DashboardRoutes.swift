import Foundation
import HTTPTypes
import HaulWire
import Hummingbird
import NIOCore

extension HTTPField.Name {
    /// Sent by the dashboard's scripts with every change it asks for: a page on another
    /// site cannot send it without a CORS preflight the daemon never grants.
    static let haulDashboard = HTTPField.Name("X-Haul-Dashboard")!
}

/// The web dashboard on the TCP listener: its page and files at `/`, open to anyone (they
/// hold no data), and `/login?code=…`, which spends a one-time link from `haul ui` and
/// gives the browser its session cookie. Everything the page shows comes from `/v1`, which
/// needs that cookie (or the token).
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
        router.get("/login") { request, _ in
            let code = request.uri.queryParameters.get("code") ?? ""
            guard code.count <= 128, let session = logins.redeem(String(code)) else {
                return Self.page(
                    status: .unauthorized,
                    title: "This login link has expired",
                    text: "A link from haul ui works once, within five minutes. Run haul ui again for a new one."
                )
            }
            var response = Response(status: .seeOther)
            response.headers[.location] = "/"
            response.headers[.setCookie] =
                "\(DashboardLogins.cookieName)=\(session); Path=/; HttpOnly; SameSite=Strict"
            response.headers[.cacheControl] = "no-store"
            response.headers[.referrerPolicy] = "no-referrer"
            return response
        }
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
