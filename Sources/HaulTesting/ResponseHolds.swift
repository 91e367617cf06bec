import NIOCore
import Synchronization

/// Responses a test holds at a point of their body until it lets them go: downloads that
/// overlap because the test says so, not because a throttled server is slow enough.
///
/// A hold is per path. Once a path is released its responses pass freely, the ones
/// waiting and every later one. A response waiting here also ends its wait when its
/// connection closes (the client gave up on it: it is no longer under way) or its task is
/// cancelled (the server shutting down).
final class ResponseHolds: Sendable {
    private struct Waiter {
        var path: String
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var released: Set<String> = []
        var releasedAll = false
        var waiters: [Int: Waiter] = [:]
        /// Waits whose connection closed before they began waiting.
        var ended: Set<Int> = []
        var nextID = 0
    }

    private let state = Mutex(State())

    /// Responses waiting right now, for any path.
    var waiting: Int { state.withLock { $0.waiters.count } }

    /// Waits until `path` is released or `closed` completes (returns at once if either has).
    func wait(at path: String, closed: EventLoopFuture<Void>) async {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        closed.whenComplete { _ in self.end(id) }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let passes = state.withLock { state in
                    if state.releasedAll || state.released.contains(path) || state.ended.remove(id) != nil
                        || Task.isCancelled
                    {
                        return true
                    }
                    state.waiters[id] = Waiter(path: path, continuation: continuation)
                    return false
                }
                if passes { continuation.resume() }
            }
        } onCancel: {
            end(id)
        }
        state.withLock { _ = $0.ended.remove(id) }
    }

    /// Ends one wait, or marks it ended if it has not begun.
    private func end(_ id: Int) {
        let waiter = state.withLock { state -> Waiter? in
            guard let waiter = state.waiters.removeValue(forKey: id) else {
                state.ended.insert(id)
                return nil
            }
            return waiter
        }
        waiter?.continuation.resume()
    }

    /// Lets the responses for `path` go, or for every path when `path` is nil.
    func release(_ path: String?) {
        let woken = state.withLock { state -> [Waiter] in
            if let path { state.released.insert(path) } else { state.releasedAll = true }
            let ids = state.waiters.filter { path == nil || $0.value.path == path }.map(\.key)
            return ids.compactMap { state.waiters.removeValue(forKey: $0) }
        }
        for waiter in woken { waiter.continuation.resume() }
    }
}
