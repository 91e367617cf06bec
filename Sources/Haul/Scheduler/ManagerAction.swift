import Foundation

/// What a ``DownloadManager`` does for its ``ManagerMachine``, in the order given.
enum ManagerAction: Sendable, Equatable {
    /// Start a transfer for the task, which is running now.
    case start(UUID)
    /// Ask the task's running transfer to stop.
    case stop(UUID, StopReason)
    /// Tell the task's change of state.
    case publish(UUID, from: TaskState, to: TaskState, reason: StateChangeReason)
    /// The task's run is over for good (completed or failed): announce it, run its hooks.
    case end(UUID)
    /// An event its state does not allow was asked for (a bug): log it; nothing changed.
    case illegal(UUID, TaskStateMachine.IllegalTransition)
}

/// How a task's run ended, as its ``ManagerMachine`` moves the task by it.
enum RunEnd: Sendable, Equatable {
    case completed
    /// The shared queue revoked its claim: it stopped, writing nothing.
    case revoked
    /// The store could not record it; `sharing` with a shared queue.
    case storeRefused(String, sharing: Bool)
    /// Stopped as asked, keeping its data (a pause or a yield, as its stop says).
    case paused
    case cancelled
    case failed
}
