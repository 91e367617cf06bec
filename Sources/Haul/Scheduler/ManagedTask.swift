import Foundation

/// Everything a ``DownloadManager`` knows of one task besides its store record, in one
/// value: its state machine, its place in the scheduler, its running transfer, who waits
/// for that to end, and what the store still owes it.
///
/// The manager keeps one `[UUID: ManagedTask]`; a task it knows has exactly one entry, and
/// forgetting a task is removing that entry. What exists only while a transfer runs lives in
/// a ``RunningTransfer`` beside it, so the entries of thousands of waiting and finished tasks
/// stay small.
struct ManagedTask {
    /// The task's state, changed only through its legal moves.
    var machine: TaskStateMachine
    /// How the scheduler sees it; nil for a task that has finished (completed, cancelled)
    /// since the manager opened, which never waits again unless re-added.
    var entry: Scheduler.Entry?
    /// Its running transfer, from its start until its end is handled.
    var run: RunningTransfer?
    /// Set when the store may not hold the machine's state (a write failed): the error
    /// message to record with it, if any. ``DownloadManager`` writes it again until it sticks,
    /// and reads show the machine's state meanwhile.
    var unrecorded: String??
    /// Its run ended because the store could not record it: it waits, queued but out of the
    /// scheduler, until the store accepts a write.
    var heldForStore = false
    /// Runs in a row the store failed for this task, while accepting other writes.
    var storeFailures = 0
    /// For a retrying task: the wait for its next try.
    var retryTimer: Task<Void, Never>?
    /// Tries in the current streak without progress.
    var retryAttempts = 0
    /// Its transfer was asked to stop because its route went: it waits for the network.
    var offlinePending = false
    /// With a shared queue, after its claim was revoked: the task's state in the shared store
    /// (nil when it was removed there), read when the transfer ended.
    var stateElsewhere: TaskState??

    init(_ state: TaskState, entry: Scheduler.Entry? = nil) {
        self.machine = TaskStateMachine(state)
        self.entry = entry
    }

    var state: TaskState { machine.state }

    /// The running transfer's handles, nil when none runs.
    var transfer: TransferHandles? { run?.handles }
}

/// What the manager holds for a task while its transfer runs.
final class RunningTransfer {
    let handles: TransferHandles
    /// Callers waiting for the transfer to end (a pause or cancel of a running task).
    var endWaiters: [CheckedContinuation<Void, Never>] = []
    /// The progress last published, so a tick publishes only what changed.
    var lastProgress: DownloadProgress?
    /// The task was added again with hooks while this run went on: its end looks them up,
    /// whatever the record read at its start said.
    var hooksAdded = false

    init(handles: TransferHandles) {
        self.handles = handles
    }
}
