import Foundation

/// One user's operation on a task at a time (a pause, a resume, a cancel, a removal, a
/// re-add): a second waits for the first to end, in order of arrival, then finds the task
/// as the first left it. Without turns, two operations that each read the state, then
/// await the store's write, could interleave — a resume recording the task queued and
/// starting it while a cancel recorded it cancelled — and leave the manager, the store and
/// the transfer each saying something else.
struct OperationTurns {
    /// The tasks with an operation under way, each with the operations waiting to follow it.
    private var waiting: [UUID: [CheckedContinuation<Void, Never>]] = [:]

    /// Takes the turn on `id` if it is free; false when an operation holds it.
    mutating func take(_ id: UUID) -> Bool {
        guard waiting[id] == nil else { return false }
        waiting[id] = []
        return true
    }

    /// Queues `continuation` for the turn on `id`, which ``pass(_:)`` hands it.
    /// - Precondition: the turn is taken (``take(_:)`` returned false).
    mutating func wait(_ id: UUID, _ continuation: CheckedContinuation<Void, Never>) {
        waiting[id, default: []].append(continuation)
    }

    /// Ends the turn on `id`: the next operation waiting takes it, or it is free.
    mutating func pass(_ id: UUID) {
        guard var queue = waiting[id], !queue.isEmpty else {
            waiting[id] = nil
            return
        }
        let next = queue.removeFirst()
        waiting[id] = queue
        next.resume()
    }
}
