import Foundation

/// One page of a listing of tasks in queue order: at most ``limit`` tasks, those after task
/// ``after`` (none: from the start). The next page starts after the last task of this one,
/// so a listing of a million queued tasks is read a page at a time, each from an index.
/// A page may also skip ``offset`` tasks first, take only tasks in some ``states``, and go
/// from the end of the queue backwards (``fromEnd``) — aria2's `tellWaiting` windows.
public struct TaskPage: Sendable, Hashable {
    /// The most tasks one page holds.
    public static let maxLimit = 10_000

    /// At most this many tasks: 1 to ``maxLimit``.
    public var limit: Int
    /// The tasks after this one in queue order (before it, ``fromEnd``); nil: from the first.
    public var after: UUID?
    /// How many of those to skip first (0 or more).
    public var offset: Int = 0
    /// Only tasks in these states; nil: in any.
    public var states: Set<TaskState>?
    /// From the last task in queue order backwards.
    public var fromEnd = false
    /// Only tasks whose ids begin with these digits (an aria2 GID), read from the ids' index.
    package var idPrefix: IDPrefix?

    /// - Throws: ``HaulError/Code/invalidArgument`` for a limit out of 1 to ``maxLimit`` or a
    ///   negative offset.
    public init(
        limit: Int,
        after: UUID? = nil,
        offset: Int = 0,
        states: Set<TaskState>? = nil,
        fromEnd: Bool = false
    ) throws {
        guard (1...Self.maxLimit).contains(limit) else {
            throw HaulError(.invalidArgument, "A page of tasks holds 1 to \(Self.maxLimit) tasks, not \(limit)")
        }
        guard offset >= 0 else {
            throw HaulError(.invalidArgument, "A page of tasks skips 0 tasks or more, not \(offset)")
        }
        self.limit = limit
        self.after = after
        self.offset = offset
        self.states = states
        self.fromEnd = fromEnd
    }

    /// The page's states as the store names them, in a fixed order; nil for any.
    package var stateNames: [String]? { states.map { $0.map(\.rawValue).sorted() } }

    /// The page a listing's `limit` and `after` ask for: nil when neither is given (every
    /// task); `after` alone, a page of ``maxLimit``.
    /// - Throws: ``HaulError/Code/invalidArgument`` for a limit out of 1 to ``maxLimit``.
    public static func asked(limit: Int?, after: UUID?) throws -> TaskPage? {
        guard limit != nil || after != nil else { return nil }
        return try TaskPage(limit: limit ?? maxLimit, after: after)
    }

    /// The error of a page whose ``after`` task no longer exists (removed since the last page).
    package static func gone(_ id: UUID) -> HaulError {
        HaulError(
            .notFound,
            "No task \(id.shown) to list after: it was removed since the page that showed it",
            hint: "List again from the start"
        )
    }
}
