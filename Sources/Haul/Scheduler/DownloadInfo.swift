import Foundation

/// What a ``DownloadManager`` knows about one task.
public struct DownloadInfo: Sendable, Equatable, Codable {
    /// The task's identifier.
    public var id: UUID
    /// The URL asked for. Encoded (in the API's answers, `--json` output and events) with
    /// its secrets hidden, see ``Redaction``.
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
    /// For a task waiting to try again (``TaskState/retrying``): when it tries next.
    /// ``errorMessage`` says what failed last.
    public var nextTryAt: Date?
    /// For a failed task: the class of its failure (``HaulError/Code``), as its error had it.
    public var errorCode: HaulError.Code?
    /// With a queue daemons share (``SharedQueue``): the daemon holding the task's claim, the
    /// one running it (its name in the shared store).
    public var node: String?
    /// For a download with mirrors: the URL and each mirror, with the bytes each delivered
    /// (at the last checkpoint) and why any was dropped. Encoded with each URL's secrets
    /// hidden and without validators.
    public var sources: [DownloadSource] = []

    package init(
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
        connections: Int? = nil,
        nextTryAt: Date? = nil,
        errorCode: HaulError.Code? = nil
    ) {
        self.nextTryAt = nextTryAt
        self.errorCode = errorCode
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

    /// A task as its record says, in `state` with `bytesCommitted` on disk.
    init(_ record: TaskRecord, state: TaskState, bytesCommitted: Int64) {
        self.init(
            id: record.id,
            url: record.url,
            path: record.destinationPath,
            directory: record.directory,
            state: state,
            priority: record.priority,
            bytesCommitted: bytesCommitted,
            totalBytes: record.totalLength,
            errorMessage: nil,
            session: record.session,
            rateLimit: record.rateLimit,
            connections: record.connections
        )
    }

    private enum CodingKeys: String, CodingKey {
        case id, url, path, directory, state, priority, bytesCommitted, totalBytes, errorMessage, session
        case rateLimit, connections, nextTryAt, errorCode, sources, node
    }

    /// A source as the API and `--json` show it.
    private struct SourceView: Codable {
        var url: String
        var verified: Bool
        var dropped: String?
        var bytes: Int64
    }

    public init(from decoder: any Decoder) throws {
        let container = try decoder.container(keyedBy: CodingKeys.self)
        id = try container.decode(UUID.self, forKey: .id)
        url = try container.decode(URL.self, forKey: .url)
        path = try container.decodeIfPresent(String.self, forKey: .path)
        directory = try container.decode(String.self, forKey: .directory)
        state = try container.decode(TaskState.self, forKey: .state)
        priority = try container.decode(Int.self, forKey: .priority)
        bytesCommitted = try container.decode(Int64.self, forKey: .bytesCommitted)
        totalBytes = try container.decodeIfPresent(Int64.self, forKey: .totalBytes)
        errorMessage = try container.decodeIfPresent(String.self, forKey: .errorMessage)
        session = try container.decode(String.self, forKey: .session)
        rateLimit = try container.decodeIfPresent(Int64.self, forKey: .rateLimit)
        connections = try container.decodeIfPresent(Int.self, forKey: .connections)
        nextTryAt = try container.decodeIfPresent(Date.self, forKey: .nextTryAt)
        // A code this version does not know is left out, not an error.
        errorCode = try container.decodeIfPresent(String.self, forKey: .errorCode).flatMap(HaulError.Code.init(name:))
        node = try container.decodeIfPresent(String.self, forKey: .node)
        sources = try (container.decodeIfPresent([SourceView].self, forKey: .sources) ?? []).compactMap { view in
            URL(string: view.url).map {
                DownloadSource(url: $0, verified: view.verified, dropped: view.dropped, bytes: view.bytes)
            }
        }
    }

    /// Encodes the fields, the URL with its secrets hidden.
    public func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(id, forKey: .id)
        try container.encode(Redaction.url(url), forKey: .url)
        try container.encodeIfPresent(path, forKey: .path)
        try container.encode(directory, forKey: .directory)
        try container.encode(state, forKey: .state)
        try container.encode(priority, forKey: .priority)
        try container.encode(bytesCommitted, forKey: .bytesCommitted)
        try container.encodeIfPresent(totalBytes, forKey: .totalBytes)
        try container.encodeIfPresent(errorMessage.map(Redaction.text), forKey: .errorMessage)
        try container.encode(session, forKey: .session)
        try container.encodeIfPresent(rateLimit, forKey: .rateLimit)
        try container.encodeIfPresent(connections, forKey: .connections)
        try container.encodeIfPresent(nextTryAt, forKey: .nextTryAt)
        try container.encodeIfPresent(errorCode?.description, forKey: .errorCode)
        try container.encodeIfPresent(node, forKey: .node)
        if !sources.isEmpty {
            try container.encode(
                sources.map {
                    SourceView(
                        url: Redaction.url($0.url),
                        verified: $0.verified,
                        dropped: $0.dropped.map(Redaction.text),
                        bytes: $0.bytes
                    )
                },
                forKey: .sources
            )
        }
    }
}
