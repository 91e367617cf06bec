import Foundation

/// What a ``DownloadManager`` knows about one task.
public struct DownloadInfo: Sendable, Equatable, Codable {
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
    /// The session it belongs to.
    public var session: String
    /// Its own rate limit in bytes per second, if it has one.
    public var rateLimit: Int64?
    /// The connections it may use, when the request said.
    public var connections: Int?

    init(
        id: UUID,
        url: URL,
        path: String?,
        directory: String,
        state: TaskState,
        priority: Int,
        bytesCommitted: Int64,
        totalBytes: Int64?,
        errorMessage: String?,
        session: String,
        rateLimit: Int64? = nil,
        connections: Int? = nil
    ) {
        self.id = id
        self.url = url
        self.path = path
        self.directory = directory
        self.state = state
        self.priority = priority
        self.bytesCommitted = bytesCommitted
        self.totalBytes = totalBytes
        self.errorMessage = errorMessage
        self.session = session
        self.rateLimit = rateLimit
        self.connections = connections
    }
}
