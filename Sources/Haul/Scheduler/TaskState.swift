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
    /// Stopped by request; its partial data was removed.
    case cancelled
}
