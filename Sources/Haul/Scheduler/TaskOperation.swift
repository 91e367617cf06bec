/// What a user can do to tasks, one at a time or many at once (``DownloadManager/perform(_:on:strict:deleteFiles:)``).
public enum TaskOperation: String, Sendable, CaseIterable {
    /// Stop, keeping the data: queued or running tasks.
    case pause
    /// Queue again: paused or failed tasks.
    case resume
    /// Stop and delete the partial data: unfinished tasks.
    case cancel
    /// Forget the task (cancelling it first when unfinished): any task.
    case remove

    /// Whether the operation applies to a task in `state`, by the state machine's rules.
    public func applies(to state: TaskState) -> Bool {
        switch self {
        case .pause: return TaskStateMachine.next(from: state, on: .pause) != nil
        case .resume: return TaskStateMachine.next(from: state, on: .resume) != nil
        case .cancel: return TaskStateMachine.next(from: state, on: .cancel) != nil
        case .remove: return true
        }
    }

    /// Whether a task in `state` already is where the operation would take it — paused,
    /// queued or running, cancelled — so asking for it again changes nothing and is no error.
    public func isDone(in state: TaskState) -> Bool {
        switch self {
        case .pause: return state == .paused
        case .resume: return state == .queued || state == .running
        case .cancel: return state == .cancelled
        case .remove: return false
        }
    }
}
