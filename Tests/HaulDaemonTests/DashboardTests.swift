import Foundation
import HTTPTypes
import HaulTestSupport
import HaulWire
import HaulWireMapping
import Hummingbird
import HummingbirdTesting
import NIOCore
import Testing

@testable import Haul
@testable import HaulDaemon

/// The dashboard's page and its login, in process: the page is open, its data is not; a
/// login link's code (in its fragment) works once and opens a session the page sends in
/// X-Haul-Session; no cookie is set or accepted, so a page on another port of the same host
/// (browsers share cookies across ports) gets nothing it could replay. DashboardBrowserTests
/// drive the page in a real browser.
@Suite("Dashboard login", .timeLimit(.minutes(10)))
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

    @Test("a link's code works once and opens a session sent as a header; no cookie is set or accepted")
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
            #expect(link.url.wholeMatch(of: ##/http://127\.0\.0\.1:7800/#login=[0-9a-f]{64}/##) != nil, "\(link.url)")
            #expect(link.expiresAt.timeIntervalSinceNow > 200 && link.expiresAt.timeIntervalSinceNow <= 300)
            let code = String(link.url.split(separator: "=").last ?? "")
            let login = ByteBuffer(string: #"{"code": "\#(code)"}"#)

            let session = try await client.execute(uri: "/login", method: .post, body: login) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.setCookie] == nil)
                #expect(response.headers[.cacheControl] == "no-store")
                let answer = try JSONSerialization.jsonObject(with: Data(buffer: response.body)) as? [String: String]
                return try #require(answer?["session"])
            }
            #expect(session.count == 64 && session != code)
            // Once only.
            try await client.execute(uri: "/login", method: .post, body: login) { response in
                #expect(response.status == .unauthorized)
                #expect(String(buffer: response.body).contains("run haul ui again"))
            }
            let header = HTTPField.Name("X-Haul-Session")!
            try await client.execute(uri: "/v1/status", method: .get, headers: [header: session]) { response in
                #expect(response.status == .ok)
            }
            let pause = ByteBuffer(string: #"{"all": true}"#)
            try await client.execute(uri: "/v1/tasks/pause", method: .post, headers: [header: session], body: pause) {
                response in
                #expect(response.status == .ok)
            }
            // The session as a cookie, as another local server would have received one: nothing,
            // for reading, changing, or following a session's events with pauseOnDisconnect.
            let cookie = "haul_session=\(session)"
            for (path, method) in [
                ("/v1/status", HTTPRequest.Method.get), ("/v1/tasks/pause", .post),
                ("/v1/sessions/g/events?pauseOnDisconnect=true", .get),
            ] {
                try await client.execute(
                    uri: path,
                    method: method,
                    headers: [.cookie: cookie, HTTPField.Name("X-Haul-Dashboard")!: "1"],
                    body: method == .post ? pause : nil
                ) { response in
                    #expect(response.status == .unauthorized, "\(path)")
                }
            }
            try await client.execute(
                uri: "/v1/status",
                method: .get,
                headers: [header: String(repeating: "0", count: 64)]
            ) {
                response in
                #expect(response.status == .unauthorized)
            }
            for body in [
                #"{"code": "\#(String(repeating: "a", count: 64))"}"#, "not json", String(repeating: "x", count: 5000),
            ] {
                try await client.execute(uri: "/login", method: .post, body: ByteBuffer(string: body)) { response in
                    #expect(response.status == .unauthorized)
                }
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
    }

    @Test("the login link's host: a wildcard listener becomes loopback, IPv6 goes in brackets")
    func browserAddress() {
        #expect(DaemonRoutes.browserAddress("127.0.0.1:7800") == "127.0.0.1:7800")
        #expect(DaemonRoutes.browserAddress("0.0.0.0:7800") == "127.0.0.1:7800")
        #expect(DaemonRoutes.browserAddress("::1:7800") == "[::1]:7800")
        #expect(DaemonRoutes.browserAddress(":::7800") == "[::1]:7800")
    }
}
