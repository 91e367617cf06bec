import Foundation
import GRDB

/// One download as the store keeps it.
struct TaskRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "task"

    var id: UUID
    var session: String
    var url: String
    var finalURL: String?
    /// The directory the finished file goes into.
    var directory: String
    /// The file name, once known: given by the user, or chosen from the first response.
    var fileName: String?
    /// Whether the user fixed the name (`-o`); otherwise the server's response may choose it.
    var explicitName: Bool
    /// Extra request headers, JSON-encoded `[HTTPHeaderField]`.
    var requestHeaders: String
    var checksum: String?
    var overwrite: Bool
    var state: String
    var priority: Int
    var etag: String?
    var lastModified: String?
    var serverDate: String?
    var totalLength: Int64?
    var createdAt: Date
    var queuedAt: Date
    var updatedAt: Date
    var errorMessage: String?
    /// Position in the waiting line: only grows; a task resumed by the user gets a new one.
    var queueOrder: Int64
    /// Whether the background daemon owns the task (rather than a `haul get` process).
    var background: Bool
    /// Connections to split the download over; nil for the downloader's default.
    var connections: Int?
    /// The smallest segment worth its own connection; nil for the downloader's default.
    var minSplitSize: Int64?
    /// This download's rate limit in bytes per second; nil for none.
    var rateLimit: Int64?
    /// The part file this task created and owns; nil until it creates one.
    var partPath: String?
    /// The part file's `device:inode` when it was created.
    var partIdentity: String?

    enum Columns {
        static let id = Column(CodingKeys.id)
        static let session = Column(CodingKeys.session)
        static let url = Column(CodingKeys.url)
        static let directory = Column(CodingKeys.directory)
        static let fileName = Column(CodingKeys.fileName)
        static let explicitName = Column(CodingKeys.explicitName)
        static let state = Column(CodingKeys.state)
        static let createdAt = Column(CodingKeys.createdAt)
        static let queuedAt = Column(CodingKeys.queuedAt)
        static let queueOrder = Column(CodingKeys.queueOrder)
        static let background = Column(CodingKeys.background)
        static let partPath = Column(CodingKeys.partPath)
    }

    /// Dates are written by hand in GRDB's text format (see ``StoreDate``).
    static func databaseDateEncodingStrategy(for column: String) -> DatabaseDateEncodingStrategy {
        .custom { StoreDate.text($0) }
    }

    static func databaseDateDecodingStrategy(for column: String) -> DatabaseDateDecodingStrategy {
        .custom { StoreDate.date($0) }
    }

    var destinationPath: String? {
        fileName.map { (directory as NSString).appendingPathComponent($0) }
    }

    var validators: Validators {
        get { Validators(etag: etag, lastModified: lastModified, date: serverDate, totalLength: totalLength) }
        set {
            etag = newValue.etag
            lastModified = newValue.lastModified
            serverDate = newValue.date
            totalLength = newValue.totalLength
        }
    }
}

extension TaskRecord {
    /// A new, queued task with no response seen yet.
    init(
        id: UUID,
        url: String,
        destination: Destination,
        explicitName: Bool,
        requestHeaders: String,
        checksum: String?,
        overwrite: Bool,
        session: String = DownloadRequest.defaultSession,
        background: Bool = false,
        connections: Int? = nil,
        minSplitSize: Int64? = nil,
        rateLimit: Int64? = nil,
        now: Date
    ) {
        self.init(
            id: id,
            session: session,
            url: url,
            finalURL: nil,
            directory: destination.directory,
            fileName: destination.fileName,
            explicitName: explicitName,
            requestHeaders: requestHeaders,
            checksum: checksum,
            overwrite: overwrite,
            state: TaskState.queued.rawValue,
            priority: 0,
            etag: nil,
            lastModified: nil,
            serverDate: nil,
            totalLength: nil,
            createdAt: now,
            queuedAt: now,
            updatedAt: now,
            errorMessage: nil,
            queueOrder: 0,
            background: background,
            connections: connections,
            minSplitSize: minSplitSize,
            rateLimit: rateLimit,
            partPath: nil,
            partIdentity: nil
        )
    }
}

/// One byte range of a download and how much of it is durably on disk.
///
/// A task has one or more segments; together they cover the file. `committed` is the
/// absolute offset up to which this segment's bytes were synced to the part file before
/// the record was written: a restart continues each segment from there.
struct SegmentRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "segment"

    var taskID: UUID
    var ordinal: Int
    /// First byte of the segment.
    var start: Int64
    /// One past the last byte, or nil while the length is unknown.
    var end: Int64?
    /// Bytes in `start..<committed` are durably on disk.
    var committed: Int64

    enum Columns {
        static let taskID = Column(CodingKeys.taskID)
        static let ordinal = Column(CodingKeys.ordinal)
        static let committed = Column(CodingKeys.committed)
    }
}
