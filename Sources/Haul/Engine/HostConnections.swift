import Synchronization

/// The connections the downloads to one host may hold together (`--max-connections-per-host`),
/// shared fairly among them.
///
/// - Every running download holds one connection before any holds a second: a download's
///   first connection is granted at once, even when the others hold the whole cap — a
///   download called running is transferring, never queued behind the others' connections.
/// - A further connection is granted while the host is under its cap, to the waiting
///   download that holds the fewest (the longest waiting among equals).
/// - While the host is over its cap, or a waiting download holds two fewer than the widest,
///   the widest gives one connection back at that connection's next segment boundary; the
///   connection then waits to be granted again, and comes back when there is room.
///
/// A value shared by the transfers of one manager; each download holds a ``Share``.
package final class HostConnections: Sendable {
    private struct Waiter {
        let download: Int
        let ticket: Int
        let continuation: CheckedContinuation<Bool, Never>
    }

    private struct Host {
        /// Connections held, by download.
        var held: [Int: Int] = [:]
        /// Connections told to give way that have not yet, by download.
        var yielding: [Int: Int] = [:]
        var waiting: [Waiter] = []

        var total: Int { held.values.reduce(0, +) }
        func effective(_ download: Int) -> Int { held[download, default: 0] - yielding[download, default: 0] }
    }

    private struct State {
        var cap: Int
        var hosts: [String: Host] = [:]
        var nextID = 0
    }

    private let state: Mutex<State>

    /// - Parameter cap: connections at once per host, 1 or more.
    package init(cap: Int) {
        state = Mutex(State(cap: max(1, cap)))
    }

    /// The cap in force.
    package var cap: Int { state.withLock { $0.cap } }

    /// Changes the cap, at once: raised, waiting connections are granted; lowered, the
    /// widest downloads give connections back at their next segment boundaries.
    package func setCap(_ cap: Int) {
        let granted = state.withLock { state in
            state.cap = max(1, cap)
            return state.hosts.keys.flatMap { Self.grant(&state, host: $0) }
        }
        for waiter in granted { waiter.continuation.resume(returning: true) }
    }

    /// A new download's share of `host`'s connections (a run's: a run holds its own).
    package func share(host: String) -> Share {
        let id = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        return Share(budget: self, host: host, download: id)
    }

    /// Connections held to `host` now, by all its downloads.
    package func held(host: String) -> Int {
        state.withLock { $0.hosts[host]?.total ?? 0 }
    }

    /// Connections waiting to be granted for `host` now.
    package func waiting(host: String) -> Int {
        state.withLock { $0.hosts[host]?.waiting.count ?? 0 }
    }

    /// One download's connections to its host.
    package final class Share: Sendable {
        let budget: HostConnections
        let host: String
        let download: Int

        fileprivate init(budget: HostConnections, host: String, download: Int) {
            self.budget = budget
            self.host = host
            self.download = download
        }

        /// Takes a connection without waiting: for the one carrying the download's first
        /// response, which holds a connection already.
        func hold() {
            budget.state.withLock { $0.hosts[host, default: Host()].held[download, default: 0] += 1 }
        }

        /// Waits for a connection; false when the waiting task was cancelled.
        func acquire() async -> Bool {
            await budget.acquire(host: host, download: download)
        }

        /// Gives a connection back; `yielded` when it ended because ``shouldYield()`` said so.
        func giveBack(yielded: Bool = false) {
            budget.giveBack(host: host, download: download, yielded: yielded)
        }

        /// Whether the connection asking, at a segment boundary, should give way to another
        /// download (and then wait for a connection again). True at most once per connection
        /// needed: the answer counts it as giving way.
        func shouldYield() -> Bool {
            budget.shouldYield(host: host, download: download)
        }

        /// Runs one connection of this download while granted (`alreadyHeld`: granted with
        /// ``hold()``): when it gives way, it waits to be granted again and goes on (`body`
        /// is told which round it is); when it ends otherwise, it ends.
        func connection(
            alreadyHeld: Bool = false,
            _ body: (_ round: Int) async throws -> SegmentWorker.Ending
        ) async throws {
            var held = alreadyHeld
            for round in 0... {
                if !held, !(await acquire()) { return }
                held = false
                let ending: SegmentWorker.Ending
                do {
                    ending = try await body(round)
                } catch {
                    giveBack()
                    throw error
                }
                giveBack(yielded: ending == .yielded)
                guard ending == .yielded else { return }
            }
        }
    }

    // MARK: The rules

    private func acquire(host: String, download: Int) async -> Bool {
        let ticket = state.withLock { state in
            state.nextID += 1
            return state.nextID
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                enum Answer { case granted, cancelled, waiting }
                let answer = state.withLock { state -> Answer in
                    // Cancelled before waiting: the handler below has run, or finds nothing.
                    if Task.isCancelled { return .cancelled }
                    var entry = state.hosts[host, default: Host()]
                    // The first connection at once; a further one while there is room and
                    // nobody waits ahead of it.
                    if entry.held[download, default: 0] == 0
                        || (entry.total < state.cap && entry.waiting.isEmpty)
                    {
                        entry.held[download, default: 0] += 1
                        state.hosts[host] = entry
                        return .granted
                    }
                    entry.waiting.append(Waiter(download: download, ticket: ticket, continuation: continuation))
                    state.hosts[host] = entry
                    return .waiting
                }
                switch answer {
                case .granted: continuation.resume(returning: true)
                case .cancelled: continuation.resume(returning: false)
                case .waiting: break  // Resumed by a grant, or by the cancellation handler.
                }
            }
        } onCancel: {
            let waiter = state.withLock { state -> Waiter? in
                guard let index = state.hosts[host]?.waiting.firstIndex(where: { $0.ticket == ticket }) else {
                    return nil
                }
                return state.hosts[host]?.waiting.remove(at: index)
            }
            waiter?.continuation.resume(returning: false)
        }
    }

    private func giveBack(host: String, download: Int, yielded: Bool) {
        let granted = state.withLock { state -> [Waiter] in
            guard var entry = state.hosts[host] else { return [] }
            let held = entry.held[download, default: 0] - 1
            entry.held[download] = held > 0 ? held : nil
            if yielded, let count = entry.yielding[download] {
                entry.yielding[download] = count > 1 ? count - 1 : nil
            }
            state.hosts[host] = entry
            let granted = Self.grant(&state, host: host)
            if state.hosts[host].map({ $0.held.isEmpty && $0.waiting.isEmpty }) == true {
                state.hosts[host] = nil
            }
            return granted
        }
        for waiter in granted { waiter.continuation.resume(returning: true) }
    }

    private func shouldYield(host: String, download: Int) -> Bool {
        state.withLock { state in
            guard var entry = state.hosts[host] else { return false }
            let mine = entry.effective(download)
            guard mine > 1 else { return false }
            // Only the widest gives way (one at a time among equals: the answer counts).
            let widest = entry.held.keys.map { entry.effective($0) }.max() ?? 0
            guard mine == widest else { return false }
            let counted = entry.total - entry.yielding.values.reduce(0, +)
            let over = counted > state.cap
            let narrower = entry.waiting.contains { entry.effective($0.download) + 2 <= mine }
            guard over || (counted >= state.cap && narrower) else { return false }
            entry.yielding[download, default: 0] += 1
            state.hosts[host] = entry
            return true
        }
    }

    /// The waiters of `host` granted now, taken off its line and counted as holding.
    private static func grant(_ state: inout State, host: String) -> [Waiter] {
        guard var entry = state.hosts[host] else { return [] }
        var granted: [Waiter] = []
        while !entry.waiting.isEmpty {
            // The download holding the fewest first; among equals, the longest waiting.
            let index = entry.waiting.indices.min { a, b in
                let (x, y) = (
                    entry.held[entry.waiting[a].download, default: 0], entry.held[entry.waiting[b].download, default: 0]
                )
                return x != y ? x < y : a < b
            }!
            let waiter = entry.waiting[index]
            guard entry.held[waiter.download, default: 0] == 0 || entry.total < state.cap else { break }
            entry.waiting.remove(at: index)
            entry.held[waiter.download, default: 0] += 1
            granted.append(waiter)
        }
        state.hosts[host] = entry
        return granted
    }
}
