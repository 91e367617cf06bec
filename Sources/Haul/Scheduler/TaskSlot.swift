import Foundation

/// All a ``DownloadManager`` knows of one task besides its store record: one slot of its
/// ``ManagerMachine``, changed only by the machine.
struct TaskSlot: Sendable, Equatable {
    /// The task's state, changed only through its legal moves.
    var machine: TaskStateMachine
    /// How the scheduler sees it; nil for a task that finished (completed, cancelled)
    /// before the manager opened, which never waits again unless added again.
    var entry: Scheduler.Entry?
    /// Set when the store may not hold the machine's state (a write failed): the error
    /// message to record with it, if any. The manager writes it again until it sticks,
    /// and reads show the machine's state meanwhile.
    var unrecorded: String??
    /// Its run ended because the store could not record it: it waits, queued but out of
    /// the line, until the store accepts a write.
    var heldForStore = false
    /// Runs in a row the store failed for this task, while accepting other writes.
    var storeFailures = 0
    /// Tries in the current streak of retries without progress.
    var retryAttempts = 0
    /// Its transfer was asked to stop because its route went: it waits for the network.
    var offlinePending = false
    /// With a shared queue, after its claim was revoked: the task's state in the shared
    /// store (nil when it was removed there), read when the transfer ended.
    var stateElsewhere: TaskState??

    init(_ state: TaskState, entry: Scheduler.Entry? = nil) {
        self.machine = TaskStateMachine(state)
        self.entry = entry
    }

    var state: TaskState { machine.state }
}
