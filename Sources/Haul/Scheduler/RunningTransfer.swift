import Foundation

/// What a ``DownloadManager`` holds for a task while its transfer runs, beside the task's
/// slot in its ``ManagerMachine``: the run's handles and who waits for its end. The slots of
/// thousands of waiting and finished tasks stay small.
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
