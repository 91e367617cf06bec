import NIOCore
import NIOHTTP1
import Synchronization

/// Every connection a ``TestServer``'s listener accepted, from the moment NIO wraps it until
/// one owner closes it: the accept loop's `serve`, or the server's shutdown for those the loop
/// never took. NIO traps when an accepted connection's wrapper is dropped without its writer
/// finished (swift-nio#2637, #3481): closing the listener while an accept is under way can
/// leave one in flight past the loop's end, and dropped. Held here, each is closed by exactly
/// one owner, however the accept and the shutdown interleave.
final class AcceptedConnections: Sendable {
    typealias Connection = NIOAsyncChannel<HTTPServerRequestPart, ByteBuffer>

    private struct State {
        var waiting: [ObjectIdentifier: Connection] = [:]
        var closing = false
    }

    private let state = Mutex(State())

    /// Holds a connection just accepted; when the server is already closing, closes it at once.
    func accepted(_ connection: Connection) {
        let closeNow = state.withLock { state in
            if state.closing { return true }
            state.waiting[Self.key(connection)] = connection
            return false
        }
        if closeNow { Task { await Self.close(connection) } }
    }

    /// Takes `connection` to serve it: false when the shutdown took it first (and closes it).
    func take(_ connection: Connection) -> Bool {
        state.withLock { $0.waiting.removeValue(forKey: Self.key(connection)) != nil }
    }

    /// From now on every connection is closed as it comes; those held, never served, are closed.
    func closeAll() async {
        let left = state.withLock { state in
            state.closing = true
            defer { state.waiting = [:] }
            return Array(state.waiting.values)
        }
        for connection in left { await Self.close(connection) }
    }

    private static func key(_ connection: Connection) -> ObjectIdentifier {
        ObjectIdentifier(connection.channel as AnyObject)
    }

    private static func close(_ connection: Connection) async {
        try? await connection.executeThenClose { _, _ in }
    }
}
