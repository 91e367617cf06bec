import Foundation

/// What a ``DownloadManager`` knows about one task.
public struct DownloadInfo: Sendable, Equatable {
    /// The task's identifier.
    public var id: UUID
    /// The URL asked for.
    public var url: URL
    /// The finished file's path, once its name is known.
    public var path: String?
    /// The directory the file goes into.
    public var directory: String
    /// Where the task is in its life.
    public var state: TaskState
    /// Higher runs sooner.
    public var priority: Int
    /// Bytes safely on disk (at the last checkpoint).
    public var bytesCommitted: Int64
    /// The file's length, when known.
    public var totalBytes: Int64?
    /// Why it failed, for a failed task.
    public var errorMessage: String?

    init(record: TaskRecord, committed: Int64) {
        self.id = record.id
        self.url = URL(string: record.url)!
        self.path = record.destinationPath
        self.directory = record.directory
        self.state = TaskState(rawValue: record.state) ?? .failed
        self.priority = record.priority
        self.bytesCommitted = committed
        self.totalBytes = record.totalLength
        self.errorMessage = record.errorMessage
    }
}
