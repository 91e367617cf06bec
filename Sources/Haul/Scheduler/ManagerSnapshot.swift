import Foundation

/// What a ``DownloadManager``'s listings and counts show of its tasks, taken from its
/// ``ManagerMachine`` at one moment: every count and every state shown comes from the same
/// view, so `haul status`, `haul list` (both forms), `/v1/status`, `/metrics`, the dashboard
/// and aria2's `getGlobalStat` agree.
///
/// Taking one costs nothing: it shares the machine's storage (copy on write), and each view
/// is computed when asked for.
struct ManagerSnapshot: Sendable {
    /// The tasks whose transfer runs (in ``TaskState/running``; one asked to make room for
    /// others is running until it has stopped).
    let running: Set<UUID>
    let slots: TaskSlots
    let scheduler: Scheduler

    /// The queued tasks waiting in line.
    var waiting: Int { scheduler.waitingCount - running.reduce(0) { $0 + (scheduler.isWaiting($1) ? 1 : 0) } }

    /// `info`, read from the store, as the manager shows it: running, for a run started here
    /// that the store still calls queued (a new download records "running" with its first
    /// response); the state kept here, when the store refused to record it.
    func shown(_ info: DownloadInfo) -> DownloadInfo {
        var info = info
        if info.state == .queued, running.contains(info.id) {
            info.state = .running
            return info
        }
        guard let slot = slots[info.id], let message = slot.unrecorded else { return info }
        info.state = slot.state
        info.errorMessage = slot.state == .failed ? message : nil
        return info
    }

    /// The tasks whose shown state may differ from the store's (``shown(_:)``).
    var overlaidIDs: [UUID] { Array(running) + slots.owing.filter { slots[$0]?.unrecorded != nil } }
}
