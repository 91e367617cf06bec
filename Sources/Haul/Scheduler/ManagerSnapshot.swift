import Foundation

/// What a ``DownloadManager``'s listings and counts show of its tasks, taken from its
/// ``ManagerMachine`` at one moment: every count and every state shown comes from the same
/// view, so `haul status`, `haul list` (both forms), `/v1/status`, `/metrics`, the dashboard
/// and aria2's `getGlobalStat` agree.
struct ManagerSnapshot: Sendable {
    /// The tasks whose transfer runs (in ``TaskState/running``; one asked to make room for
    /// others is running until it has stopped).
    let running: Set<UUID>
    /// The queued tasks waiting in line.
    let waiting: Int
    /// The tasks whose state the store may not hold (it refused the write): the state here,
    /// and the error message to record with it.
    let unrecorded: [UUID: (state: TaskState, message: String?)]

    /// `info`, read from the store, as the manager shows it: running, for a run started here
    /// that the store still calls queued (a new download records "running" with its first
    /// response); the state kept here, when the store refused to record it.
    func shown(_ info: DownloadInfo) -> DownloadInfo {
        var info = info
        if info.state == .queued, running.contains(info.id) {
            info.state = .running
            return info
        }
        guard let (state, message) = unrecorded[info.id] else { return info }
        info.state = state
        info.errorMessage = state == .failed ? message : nil
        return info
    }

    /// The tasks whose shown state may differ from the store's (``shown(_:)``).
    var overlaidIDs: [UUID] { Array(running) + unrecorded.keys }
}
