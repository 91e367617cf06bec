import Foundation
import Synchronization

/// The dashboard's logins: one-time links (what `haul ui` prints) and the browser sessions
/// they open. Kept in memory only: a restarted daemon asks for a new link.
///
/// A link's code works once, within ``linkLifetime``; redeeming it opens a session whose
/// id the page keeps in `sessionStorage` and sends as ``headerName`` with every request. No
/// cookie: a browser sends cookies on its own to every port of the same host (another
/// user's server on 127.0.0.1 would receive it), a header only when the page's own script
/// adds it. Both are 256 random bits, compared in constant time; at most ``maxLinks`` links
/// and ``maxSessions`` sessions are kept (the oldest goes first), so nobody can grow them
/// without bound.
final class DashboardLogins: Sendable {
    static let linkLifetime: TimeInterval = 300
    static let maxLinks = 16
    static let maxSessions = 64
    /// The header that carries a session.
    static let headerName = "X-Haul-Session"

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

    private static func randomToken() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: .min ... .max, using: &generator)) }.joined()
    }
}
