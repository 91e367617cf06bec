/// The states a download goes through.
public enum TaskState: String, Sendable, Codable, CaseIterable {
    /// Waiting for its turn.
    case queued
    /// Transferring.
    case running
    /// Stopped by request, with its data kept for a resume.
    case paused
    /// The verified file is at its destination.
    case completed
    /// Stopped by an error.
    case failed
    /// Waiting to try again after a failure that may pass (a refused connection, a reset,
    /// a timeout, a 5xx, a 429), keeping its data; ``DownloadInfo/nextTryAt`` says when. Only
    /// a manager configured to keep trying (``DownloadManager/Configuration/keepsTrying``,
    /// the daemon's) moves a task here.
    case retrying
    /// Waiting for a usable route to its server (a link down, a route gone, no network),
    /// keeping its data and spending no retries; it queues again as soon as the route is
    /// back. Only a manager that watches the network (``DownloadManager/Configuration/watchesNetwork``,
    /// the daemon's) moves a task here. `haul list` shows it as `offline`.
    case waitingForNetwork
    /// Stopped by request; its partial data was removed.
    case cancelled

    /// Whether the task has ended and nothing moves it on its own: completed, failed or cancelled.
    public var hasEnded: Bool { self == .completed || self == .failed || self == .cancelled }
}
