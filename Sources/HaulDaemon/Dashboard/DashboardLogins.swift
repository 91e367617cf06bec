import Foundation
import Synchronization

/// The dashboard's logins: one-time links (what `haul ui` prints) and the browser sessions
/// they open. Kept in memory only: a restarted daemon asks for a new link.
///
/// A link's code works once, within ``linkLifetime``; redeeming it opens a session whose
/// id the browser keeps in an HttpOnly, SameSite=Strict cookie. Both are 256 random bits,
/// compared in constant time; at most ``maxLinks`` links and ``maxSessions`` sessions are
/// kept (the oldest goes first), so nobody can grow them without bound.
final class DashboardLogins: Sendable {
    static let linkLifetime: TimeInterval = 300
    static let maxLinks = 16
    static let maxSessions = 64
    /// The cookie that carries a session.
    static let cookieName = "haul_session"

    private struct State {
        var links: [(code: String, expires: Date)] = []
        var sessions: [String] = []
    }

    private let state = Mutex(State())

    /// A new one-time code and when it stops working.
    func issueLink(now: Date = Date()) -> (code: String, expires: Date) {
        let link = (code: Self.randomToken(), expires: now.addingTimeInterval(Self.linkLifetime))
        state.withLock { state in
            state.links.removeAll { $0.expires <= now }
            state.links.append(link)
            if state.links.count > Self.maxLinks { state.links.removeFirst(state.links.count - Self.maxLinks) }
        }
        return link
    }

    /// Spends `code`: the id of a new session, or nil when the code is unknown, used or expired.
    func redeem(_ code: String, now: Date = Date()) -> String? {
        state.withLock { state in
            state.links.removeAll { $0.expires <= now }
            guard let index = state.links.firstIndex(where: { Secret.matches($0.code, code) }) else { return nil }
            state.links.remove(at: index)
            let session = Self.randomToken()
            state.sessions.append(session)
            if state.sessions.count > Self.maxSessions {
                state.sessions.removeFirst(state.sessions.count - Self.maxSessions)
            }
            return session
        }
    }

    /// Whether `session` is one a link opened.
    func isSession(_ session: String) -> Bool {
        state.withLock { state in
            // Every entry compared, so the time says nothing about which one was close.
            state.sessions.reduce(false) { $0 || Secret.matches($1, session) }
        }
    }

    /// The session id in a `Cookie` header, if it carries one.
    static func session(inCookieHeader header: String) -> String? {
        for pair in header.split(separator: ";") {
            let parts = pair.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].trimmingCharacters(in: .whitespaces) == cookieName else { continue }
            return parts[1].trimmingCharacters(in: .whitespaces)
        }
        return nil
    }

    private static func randomToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }.joined()
    }
}
