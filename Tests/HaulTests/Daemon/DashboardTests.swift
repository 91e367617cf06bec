import Foundation
import HTTPTypes
import HaulWire
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Haul
@testable import HaulDaemon

/// The dashboard's page and its login, in process: the page is open, its data is not; a
/// login link works once and opens a cookie session; a change asked with the cookie must
/// carry X-Haul-Dashboard. DashboardBrowserTests drive the page in a real browser.
@Suite("Dashboard login")
struct DashboardTests {
    static let token = "t0ken-for-the-dashboard"

    @Test("the page and its files answer without a login, with a strict content security policy")
    func page() async throws {
        try await RouteTests.withAPI(token: Self.token) { client, _ in
            for (path, type) in [
                ("/", "text/html; charset=utf-8"), ("/dashboard.js", "text/javascript; charset=utf-8"),
                ("/dashboard.css", "text/css; charset=utf-8"), ("/favicon.svg", "image/svg+xml"),
            ] {
                try await client.execute(uri: path, method: .get) { response in
                    #expect(response.status == .ok, "\(path)")
                    #expect(response.headers[.contentType] == type, "\(path)")
                    #expect(response.headers[.contentSecurityPolicy]?.contains("script-src 'self'") == true)
                    #expect(response.headers[.xContentTypeOptions] == "nosniff")
                }
            }
            try await client.execute(uri: "/", method: .get) { response in
                let html = String(buffer: response.body)
                #expect(html.contains(#"<script src="/dashboard.js" defer></script>"#))
                #expect(!html.contains("<script>"), "an inline script the policy would block")
            }
            try await client.execute(uri: "/v1/tasks", method: .get) { response in
                #expect(response.status == .unauthorized)
            }
        }
    }

    @Test("a login link works once and opens a session; its cookie reads, and changes only with X-Haul-Dashboard")
    func loginLink() async throws {
        try await RouteTests.withAPI(token: Self.token) { client, core in
            let bearer: HTTPFields = [.authorization: "Bearer \(Self.token)"]
            // No TCP listener known yet: nothing a browser could open.
            try await client.execute(uri: "/v1/login-links", method: .post, headers: bearer) { response in
                #expect(response.status == .conflict)
                let failure = try JSONDecoder().decode(API.Failure.self, from: Data(buffer: response.body))
                #expect(failure.error.contains("haul daemon --listen 127.0.0.1:7800"))
            }
            core.listen = "0.0.0.0:7800"
            let link = try await client.execute(uri: "/v1/login-links", method: .post, headers: bearer) { response in
                #expect(response.status == .ok)
                return try HaulJSON.decoder.decode(API.LoginLink.self, from: Data(buffer: response.body))
            }
            #expect(link.url.hasPrefix("http://127.0.0.1:7800/login?code="))
            #expect(link.expiresAt.timeIntervalSinceNow > 200 && link.expiresAt.timeIntervalSinceNow <= 300)
            let path = String(link.url.dropFirst("http://127.0.0.1:7800".count))

            let cookie = try await client.execute(uri: path, method: .get) { response in
                #expect(response.status == .seeOther)
                #expect(response.headers[.location] == "/")
                let setCookie = try #require(response.headers[.setCookie])
                #expect(setCookie.hasSuffix("; Path=/; HttpOnly; SameSite=Strict"))
                return String(setCookie.prefix { $0 != ";" })
            }
            #expect(cookie.hasPrefix("haul_session=") && cookie.count == "haul_session=".count + 64)
            // Once only.
            try await client.execute(uri: path, method: .get) { response in
                #expect(response.status == .unauthorized)
                #expect(response.headers[.setCookie] == nil)
                #expect(String(buffer: response.body).contains("Run haul ui again"))
            }
            try await client.execute(uri: "/v1/status", method: .get, headers: [.cookie: cookie]) { response in
                #expect(response.status == .ok)
            }
            // Another site's page can send the cookie (were it not SameSite) but not the header.
            let pause = ByteBuffer(string: #"{"all": true}"#)
            try await client.execute(uri: "/v1/tasks/pause", method: .post, headers: [.cookie: cookie], body: pause) {
                response in
                #expect(response.status == .forbidden)
            }
            try await client.execute(
                uri: "/v1/tasks/pause",
                method: .post,
                headers: [.cookie: cookie, .haulDashboard: "1"],
                body: pause
            ) { response in
                #expect(response.status == .ok)
            }
            let forged = "haul_session=" + String(repeating: "0", count: 64)
            try await client.execute(uri: "/v1/status", method: .get, headers: [.cookie: forged]) { response in
                #expect(response.status == .unauthorized)
            }
            try await client.execute(uri: "/login?code=" + String(repeating: "a", count: 64), method: .get) {
                response in
                #expect(response.status == .unauthorized)
            }
        }
    }

    @Test("a link expires after five minutes; links and sessions are bounded, the oldest going first")
    func bounds() {
        let logins = DashboardLogins()
        let start = Date()
        let stale = logins.issueLink(now: start)
        #expect(logins.redeem(stale.code, now: start.addingTimeInterval(301)) == nil)
        let links = (0..<(DashboardLogins.maxLinks + 1)).map { _ in logins.issueLink(now: start) }
        #expect(logins.redeem(links[0].code, now: start) == nil)
        #expect(logins.redeem(links[1].code, now: start) != nil)
        var sessions: [String] = []
        for _ in 0..<(DashboardLogins.maxSessions + 1) {
            sessions.append(try! #require(logins.redeem(logins.issueLink(now: start).code, now: start)))
        }
        #expect(!logins.isSession(sessions[0]))
        #expect(logins.isSession(sessions[DashboardLogins.maxSessions]))
        #expect(DashboardLogins.session(inCookieHeader: "a=b; haul_session=xyz ; c=d") == "xyz")
        #expect(DashboardLogins.session(inCookieHeader: "haul_sessionx=1") == nil)
    }

    @Test("the login link's host: a wildcard listener becomes loopback, IPv6 goes in brackets")
    func browserAddress() {
        #expect(DaemonRoutes.browserAddress("127.0.0.1:7800") == "127.0.0.1:7800")
        #expect(DaemonRoutes.browserAddress("0.0.0.0:7800") == "127.0.0.1:7800")
        #expect(DaemonRoutes.browserAddress("::1:7800") == "[::1]:7800")
        #expect(DaemonRoutes.browserAddress(":::7800") == "[::1]:7800")
    }
}
