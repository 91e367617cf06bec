import Foundation
import Haul
import HaulDaemon
import Logging
import PostgresNIO
import Synchronization

/// What the fleet's nodes tell each other at once, by PostgreSQL's LISTEN/NOTIFY on one
/// channel: a task changed by a node not running it, work waiting, the limits changed, events
/// logged. Each note is sent inside the transaction that made the change, so it arrives
/// (after the commit) only for changes that happened. Notes are hints, never the state: a
/// node that misses some (its listening connection broke) hears ``FleetSignal/resumed`` once
/// it listens again and reads what it needs from the tables.
final class FleetSignals: Sendable {
    /// The channel every node listens on.
    static let channel = "haul_fleet"

    private let subscribers = Mutex<[UUID: AsyncStream<FleetSignal>.Continuation]>([:])
    private let listener = Mutex<Task<Void, Never>?>(nil)
    private let closed = Mutex(false)

    /// The signals from now on (starting the listening connection with the first subscriber).
    /// Only the newest few are kept for a subscriber that falls behind: each says "look again".
    func subscribe(client: PostgresClient, logger: Logger) -> AsyncStream<FleetSignal> {
        let (stream, continuation) = AsyncStream.makeStream(of: FleetSignal.self, bufferingPolicy: .bufferingNewest(64))
        guard !closed.withLock({ $0 }) else {
            continuation.finish()
            return stream
        }
        let id = UUID()
        subscribers.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.removeValue(forKey: id) }
        }
        listener.withLock { task in
            guard task == nil else { return }
            task = Task { await self.listen(client: client, logger: logger) }
        }
        return stream
    }

    /// Stops listening and ends every subscriber's stream.
    func close() {
        closed.withLock { $0 = true }
        listener.withLock { $0?.cancel() }
        let all = subscribers.withLock { subscribers in
            defer { subscribers.removeAll() }
            return Array(subscribers.values)
        }
        for continuation in all { continuation.finish() }
    }

    /// Listens until cancelled, on a connection of its own; a broken connection is replaced
    /// after a second. Each time listening begins — the first time too, since notes sent
    /// between a subscription and the `LISTEN` are not heard — the subscribers hear
    /// ``FleetSignal/resumed``: from then on no note is missed, and what came before is read
    /// from the tables.
    private func listen(client: PostgresClient, logger: Logger) async {
        while !Task.isCancelled {
            do {
                try await client.withConnection { connection in
                    try await connection.listen(on: Self.channel) { notes in
                        self.broadcast(.resumed)
                        for try await note in notes {
                            if let signal = FleetSignal(note.payload) { self.broadcast(signal) }
                        }
                    }
                }
            } catch {
                guard !Task.isCancelled else { return }
                logger.warning(
                    "lost the fleet's notifications; listening again in a second (until then, nodes poll)",
                    metadata: ["error": "\(Postgres.reason(error))"]
                )
            }
            try? await Task.sleep(for: .seconds(1))
        }
    }

    private func broadcast(_ signal: FleetSignal) {
        let all = subscribers.withLock { Array($0.values) }
        for continuation in all { continuation.yield(signal) }
    }

    /// Tells every node `signal` when the transaction `connection` is in commits (at once
    /// outside a transaction).
    static func send(_ signal: FleetSignal, on connection: some PostgresQueryable, logger: Logger) async throws {
        _ = try await connection.rows("SELECT pg_notify(\(channel), \(signal.payload))", logger: logger)
    }
}

extension FleetSignal {
    /// The note's text on the channel.
    var payload: String {
        switch self {
        case .task(let id): "task \(id.uuidString)"
        case .queue: "queue"
        case .settings: "settings"
        case .events: "events"
        case .resumed: "resumed"
        case .drain(let node): "drain \(node)"
        }
    }

    /// The signal a note says; nil for one this version does not know (a newer node's).
    init?(_ payload: String) {
        switch payload {
        case "queue": self = .queue
        case "settings": self = .settings
        case "events": self = .events
        default:
            if payload.hasPrefix("drain ") {
                let node = String(payload.dropFirst(6))
                guard (try? DownloadRequest.validateNodeName(node)) != nil else { return nil }
                self = .drain(node: node)
                return
            }
            guard payload.hasPrefix("task "), let id = UUID(uuidString: String(payload.dropFirst(5))) else {
                return nil
            }
            self = .task(id)
        }
    }
}
