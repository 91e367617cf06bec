import Foundation
import GRDB

/// One download as the store keeps it.
///
/// Typed in memory, plain text in the table: the state a ``TaskState``, the URLs `URL`s, the
/// request headers `[HTTPHeaderField]` (a JSON array in their column), the checksum a
/// ``Checksum`` (`sha256=HEX`). Rows are read and written by hand (``init(row:)``,
/// ``encode(to:)``): a row that cannot be read is an error naming the task and the column,
/// never a crash or a silently dropped value.
///
/// The columns fall into groups, each written by one intent of ``Store`` — so writers that
/// run at the same time (a transfer's checkpoints, the scheduler's states, a re-add) never
/// write back each other's stale values:
/// - the request (``Store/findOrInsert(_:accept:)``'s re-add, ``Store/setRateLimit(_:for:)``,
///   ``Store/setPriority(_:_:)``): what the user asked for;
/// - the response (``Store/saveResponse(_:segments:)``): what the server said — final URL,
///   file name, validators, length — and the segments it implies;
/// - the checkpoint (``Store/checkpoint(_:segments:)``): the segments' committed offsets;
/// - the part file (``Store/setPart(_:path:identity:)``);
/// - the state (``Store/setState(_:_:error:)``, ``Store/requeue(_:state:)``): state, error,
///   place in the waiting line.
/// Only a new task (``Store/insert(_:segments:)``) and a task re-created from resume data
/// (``Store/adopt(_:segments:)``, not running by definition) write every group at once.
package struct TaskRecord: Sendable, Equatable, FetchableRecord, PersistableRecord {
    package static let databaseTableName = "task"

    package var id: UUID
    package var session: String
    package var url: URL
    package var finalURL: URL?
    /// The directory the finished file goes into.
    package var directory: String
    /// The file name, once known: given by the user, or chosen from the first response.
    package var fileName: String?
    /// Whether the user fixed the name (`-o`); otherwise the server's response may choose it.
    package var explicitName: Bool
    /// Extra request headers.
    package var requestHeaders: [HTTPHeaderField]
    package var checksum: Checksum?
    package var overwrite: Bool
    package var state: TaskState
    package var priority: Int
    package var etag: String?
    package var lastModified: String?
    package var serverDate: String?
    package var totalLength: Int64?
    package var createdAt: Date
    package var queuedAt: Date
    package var updatedAt: Date
    package var errorMessage: String?
    /// Position in the waiting line: only grows; a task resumed by the user gets a new one.
    package var queueOrder: Int64
    /// Whether the background daemon owns the task (rather than a `haul get` process).
    package var background: Bool
    /// Connections to split the download over; nil for the downloader's default.
    package var connections: Int?
    /// The smallest segment worth its own connection; nil for the downloader's default.
    package var minSplitSize: Int64?
    /// This download's rate limit in bytes per second; nil for none.
    package var rateLimit: Int64?
    /// The part file this task created and owns; nil until it creates one.
    package var partPath: String?
    /// The part file's `device:inode` when it was created.
    package var partIdentity: String?
    /// Whom the download trusts over TLS (a JSON object in its column; NULL for the defaults).
    package var tls = TLSOptions()
    /// The proxies (a JSON object in its column; NULL for none). It may hold proxy
    /// credentials, as the URL may: the store is private to its user.
    package var proxy = ProxySettings.direct
    /// The user, password and netrc file (a JSON object; NULL for none).
    package var credentials = Credentials.none
    /// What the download does with cookies (a JSON object; NULL for the defaults).
    package var cookies = CookieOptions.standard
    /// Whether it may use a metered network (the request group).
    package var allowsMetered = true
    /// Whether a file at the destination is checked against the server for a newer version.
    package var checkNewer = false
    /// Whether a file at the destination (or a stray part file) is continued as a prefix.
    package var continuesExisting = false
    /// Programs run when it ends (a JSON object; NULL for none).
    package var hooks = Hooks.none
    /// The URL and its mirrors with what the download learnt of each; empty without mirrors.
    package var sources: [DownloadSource] = []
    /// The most connections to one source; nil for the default.
    package var maxConnectionsPerServer: Int?
    /// The request's piece hashes, carried to the store when the task is inserted (they live
    /// in a table of their own, ``Store/pieces(of:)``; never read back into this record).
    package var pieces: PieceHashes?
    /// Its piece hashes as the store has them, when a read for its run fetched them
    /// (``Store/taskForRun(_:)``): `.some(nil)` for none, nil when not read.
    package var storedPieces: StoredPieces??
    /// Whether a Metalink it turns out to be is followed (``DownloadRequest/followsMetalink``).
    package var followsMetalink = true
    /// For a task waiting to try again: when (the state group).
    package var nextTryAt: Date?
    /// When its current streak of failed tries began; cleared by success or the user.
    package var retryingSince: Date?

    package enum Columns {
        package static let id = Column("id")
        package static let session = Column("session")
        package static let url = Column("url")
        package static let finalURL = Column("finalURL")
        package static let directory = Column("directory")
        package static let fileName = Column("fileName")
        package static let explicitName = Column("explicitName")
        package static let requestHeaders = Column("requestHeaders")
        package static let checksum = Column("checksum")
        package static let overwrite = Column("overwrite")
        package static let state = Column("state")
        package static let priority = Column("priority")
        package static let etag = Column("etag")
        package static let lastModified = Column("lastModified")
        package static let serverDate = Column("serverDate")
        package static let totalLength = Column("totalLength")
        package static let createdAt = Column("createdAt")
        package static let queuedAt = Column("queuedAt")
        package static let updatedAt = Column("updatedAt")
        package static let errorMessage = Column("errorMessage")
        package static let queueOrder = Column("queueOrder")
        package static let background = Column("background")
        package static let connections = Column("connections")
        package static let minSplitSize = Column("minSplitSize")
        package static let rateLimit = Column("rateLimit")
        package static let partPath = Column("partPath")
        package static let partIdentity = Column("partIdentity")
        package static let tls = Column("tls")
        package static let proxy = Column("proxy")
        package static let credentials = Column("credentials")
        package static let cookies = Column("cookies")
        package static let nextTryAt = Column("nextTryAt")
        package static let allowsMetered = Column("allowsMetered")
        package static let checkNewer = Column("checkNewer")
        package static let continuesExisting = Column("continuesExisting")
        package static let hooks = Column("hooks")
        package static let sources = Column("sources")
        package static let maxConnectionsPerServer = Column("maxConnectionsPerServer")
        package static let followsMetalink = Column("followsMetalink")
        package static let retryingSince = Column("retryingSince")
    }

    package var destinationPath: String? {
        fileName.map { (directory as NSString).appendingPathComponent($0) }
    }

    package var validators: Validators {
        get { Validators(etag: etag, lastModified: lastModified, date: serverDate, totalLength: totalLength) }
        set {
            etag = newValue.etag
            lastModified = newValue.lastModified
            serverDate = newValue.date
            totalLength = newValue.totalLength
        }
    }
}

// MARK: Reading and writing rows

extension TaskRecord {
    package init(row: Row) throws {
        let id = try row.decode(UUID.self, forColumn: Columns.id)
        let reader = RowReader(row: row, taskID: id)
        self.id = id
        session = try reader.value(Columns.session)
        url = try reader.url(Columns.url)
        finalURL = try reader.optionalURL(Columns.finalURL)
        directory = try reader.value(Columns.directory)
        fileName = try reader.value(Columns.fileName)
        explicitName = try reader.value(Columns.explicitName)
        requestHeaders = try reader.headers(Columns.requestHeaders)
        checksum = try reader.checksum(Columns.checksum)
        overwrite = try reader.value(Columns.overwrite)
        state = try reader.state(Columns.state)
        priority = try reader.value(Columns.priority)
        etag = try reader.value(Columns.etag)
        lastModified = try reader.value(Columns.lastModified)
        serverDate = try reader.value(Columns.serverDate)
        totalLength = try reader.value(Columns.totalLength)
        createdAt = try reader.date(Columns.createdAt)
        queuedAt = try reader.date(Columns.queuedAt)
        updatedAt = try reader.date(Columns.updatedAt)
        errorMessage = try reader.value(Columns.errorMessage)
        queueOrder = try reader.value(Columns.queueOrder)
        background = try reader.value(Columns.background)
        connections = try reader.value(Columns.connections)
        minSplitSize = try reader.value(Columns.minSplitSize)
        rateLimit = try reader.value(Columns.rateLimit)
        partPath = try reader.value(Columns.partPath)
        partIdentity = try reader.value(Columns.partIdentity)
        tls = try reader.tls(Columns.tls)
        proxy = try reader.proxy(Columns.proxy)
        credentials = try reader.json(Columns.credentials, default: .none, what: "a set of credentials") {
            try $0.validate()
        }
        cookies = try reader.json(Columns.cookies, default: .standard, what: "a set of cookie options") {
            try $0.validate()
        }
        nextTryAt = try reader.optionalDate(Columns.nextTryAt)
        allowsMetered = try reader.value(Columns.allowsMetered)
        checkNewer = try reader.value(Columns.checkNewer)
        continuesExisting = try reader.value(Columns.continuesExisting)
        hooks = try reader.json(Columns.hooks, default: .none, what: "a set of hooks") { try $0.validateShape() }
        sources = try reader.json(Columns.sources, default: [], what: "a list of sources") {
            try DownloadSource.validate($0)
        }
        maxConnectionsPerServer = try reader.value(Columns.maxConnectionsPerServer)
        if let cap = maxConnectionsPerServer, !(1...DownloadRequest.maxConnections).contains(cap) {
            throw reader.unreadable(Columns.maxConnectionsPerServer, "is not a number of connections from 1 to 64")
        }
        retryingSince = try reader.optionalDate(Columns.retryingSince)
        followsMetalink = try reader.value(Columns.followsMetalink)
    }

    package func encode(to container: inout PersistenceContainer) throws {
        container[Columns.id] = id
        container[Columns.session] = session
        container[Columns.url] = url.absoluteString
        container[Columns.finalURL] = finalURL?.absoluteString
        container[Columns.directory] = directory
        container[Columns.fileName] = fileName
        container[Columns.explicitName] = explicitName
        container[Columns.requestHeaders] = try TaskRecord.text(of: requestHeaders)
        container[Columns.checksum] = checksum?.description
        container[Columns.overwrite] = overwrite
        container[Columns.state] = state.rawValue
        container[Columns.priority] = priority
        container[Columns.etag] = etag
        container[Columns.lastModified] = lastModified
        container[Columns.serverDate] = serverDate
        container[Columns.totalLength] = totalLength
        container[Columns.createdAt] = StoreDate.text(createdAt)
        container[Columns.queuedAt] = StoreDate.text(queuedAt)
        container[Columns.updatedAt] = StoreDate.text(updatedAt)
        container[Columns.errorMessage] = errorMessage
        container[Columns.queueOrder] = queueOrder
        container[Columns.background] = background
        container[Columns.connections] = connections
        container[Columns.minSplitSize] = minSplitSize
        container[Columns.rateLimit] = rateLimit
        container[Columns.partPath] = partPath
        container[Columns.partIdentity] = partIdentity
        container[Columns.tls] = try TaskRecord.text(of: tls)
        container[Columns.proxy] = try TaskRecord.text(of: proxy)
        container[Columns.credentials] = credentials == .none ? nil : try TaskRecord.json(credentials)
        container[Columns.cookies] = cookies == .standard ? nil : try TaskRecord.json(cookies)
        container[Columns.nextTryAt] = nextTryAt.map(StoreDate.text)
        container[Columns.allowsMetered] = allowsMetered
        container[Columns.checkNewer] = checkNewer
        container[Columns.continuesExisting] = continuesExisting
        container[Columns.hooks] = hooks == .none ? nil : try TaskRecord.json(hooks)
        container[Columns.sources] = sources.isEmpty ? nil : try TaskRecord.json(sources)
        container[Columns.maxConnectionsPerServer] = maxConnectionsPerServer
        container[Columns.retryingSince] = retryingSince.map(StoreDate.text)
        container[Columns.followsMetalink] = followsMetalink
    }

    /// TLS options as their column holds them: NULL for the defaults, else a JSON object
    /// with sorted keys.
    package static func text(of tls: TLSOptions) throws -> String? {
        tls.isDefault ? nil : try json(tls)
    }

    /// Proxy settings as their column holds them: NULL for none, else a JSON object.
    package static func text(of proxy: ProxySettings) throws -> String? {
        proxy == .direct ? nil : try json(proxy)
    }

    package static func json(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// The request headers as their column holds them: a JSON array of `{"name", "value"}`,
    /// keys sorted so the same headers are always the same text.
    package static func text(of headers: [HTTPHeaderField]) throws -> String {
        // Most downloads have none: no encoder for them (adding 10,000 tasks would make 10,000).
        if headers.isEmpty { return "[]" }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        return String(decoding: try encoder.encode(headers), as: UTF8.self)
    }

    /// Reads a task's columns, turning any value that is not what Haul wrote into one
    /// sentence naming the task and the column.
    private struct RowReader {
        let row: Row
        let taskID: UUID

        func unreadable(_ column: Column, _ what: String) -> HaulError {
            HaulError(
                .store,
                "Task \(taskID) in the Haul store cannot be read: its \(column.name) \(what)",
                hint: "Remove it with 'haul remove \(taskID)', or point HAUL_HOME at another directory"
            )
        }

        func value<Value: DatabaseValueConvertible>(_ column: Column) throws -> Value {
            do {
                return try row.decode(Value.self, forColumn: column)
            } catch {
                throw unreadable(column, "holds a value of the wrong type")
            }
        }

        func url(_ column: Column) throws -> URL {
            let text: String = try value(column)
            return try parsedURL(text, column)
        }

        func optionalURL(_ column: Column) throws -> URL? {
            let text: String? = try value(column)
            return try text.map { try parsedURL($0, column) }
        }

        private func parsedURL(_ text: String, _ column: Column) throws -> URL {
            guard let url = URL(string: text) else { throw unreadable(column, "is not a URL") }
            return url
        }

        func headers(_ column: Column) throws -> [HTTPHeaderField] {
            let text: String = try value(column)
            if text == "[]" { return [] }
            do {
                return try JSONDecoder().decode([HTTPHeaderField].self, from: Data(text.utf8))
            } catch {
                throw unreadable(column, "is not a list of headers")
            }
        }

        func checksum(_ column: Column) throws -> Checksum? {
            let text: String? = try value(column)
            return try text.map { text in
                do {
                    return try Checksum(parsing: text)
                } catch {
                    throw unreadable(column, "is not a checksum")
                }
            }
        }

        func tls(_ column: Column) throws -> TLSOptions {
            guard let text: String = try value(column) else { return TLSOptions() }
            do {
                let options = try JSONDecoder().decode(TLSOptions.self, from: Data(text.utf8))
                try options.validate()
                return options
            } catch {
                throw unreadable(column, "is not a set of TLS options")
            }
        }

        func proxy(_ column: Column) throws -> ProxySettings {
            guard let text: String = try value(column) else { return .direct }
            do {
                let settings = try JSONDecoder().decode(ProxySettings.self, from: Data(text.utf8))
                try settings.validate()
                return settings
            } catch {
                throw unreadable(column, "is not a set of proxy settings")
            }
        }

        func json<Value: Decodable>(
            _ column: Column,
            default empty: Value,
            what: String,
            check: (Value) throws -> Void
        ) throws -> Value {
            guard let text: String = try value(column) else { return empty }
            do {
                let decoded = try JSONDecoder().decode(Value.self, from: Data(text.utf8))
                try check(decoded)
                return decoded
            } catch {
                throw unreadable(column, "is not \(what)")
            }
        }

        func state(_ column: Column) throws -> TaskState {
            let text: String = try value(column)
            guard let state = TaskState(rawValue: text) else { throw unreadable(column, "'\(text)' is not a state") }
            return state
        }

        func optionalDate(_ column: Column) throws -> Date? {
            guard let text: String = try value(column) else { return nil }
            guard let date = StoreDate.date(text) else { throw unreadable(column, "is not a date") }
            return date
        }

        func date(_ column: Column) throws -> Date {
            guard let date = StoreDate.date(row[column] as DatabaseValue) else {
                throw unreadable(column, "is not a date")
            }
            return date
        }
    }
}

extension TaskRecord {
    /// A new, queued task with no response seen yet.
    package init(
        id: UUID,
        url: URL,
        destination: Destination,
        explicitName: Bool,
        requestHeaders: [HTTPHeaderField],
        checksum: Checksum?,
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
            state: .queued,
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
package struct SegmentRecord: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    package static let databaseTableName = "segment"

    package var taskID: UUID
    package var ordinal: Int
    /// First byte of the segment.
    package var start: Int64
    /// One past the last byte, or nil while the length is unknown.
    package var end: Int64?
    /// Bytes in `start..<committed` are durably on disk.
    package var committed: Int64

    package init(taskID: UUID, ordinal: Int, start: Int64, end: Int64? = nil, committed: Int64) {
        self.taskID = taskID
        self.ordinal = ordinal
        self.start = start
        self.end = end
        self.committed = committed
    }

    package enum Columns {
        package static let taskID = Column(CodingKeys.taskID)
        package static let ordinal = Column(CodingKeys.ordinal)
        package static let committed = Column(CodingKeys.committed)
    }
}

extension SegmentRecord {
    /// Why segments cannot describe one download's file, or nil when they can: none at all,
    /// one inverted or past its own end or the file's length, two that overlap, one without
    /// an end before the last. Whatever comes from outside a running transfer — resume data,
    /// the store's rows — is checked with it before a transfer does arithmetic on it.
    package static func layoutProblem(
        _ segments: [(start: Int64, end: Int64?, committed: Int64)],
        totalLength: Int64?
    ) -> String? {
        guard !segments.isEmpty else { return "no segments" }
        let sorted = segments.sorted { $0.start < $1.start }
        for (index, segment) in sorted.enumerated() {
            guard segment.start >= 0, segment.committed >= segment.start else { return "a segment is inverted" }
            if let end = segment.end {
                guard end >= segment.start, segment.committed <= end else { return "a segment overruns its end" }
                if let totalLength, end > totalLength { return "a segment lies beyond the file's length" }
            }
            guard index + 1 < sorted.count else { continue }
            guard let end = segment.end else { return "a segment without an end is not the last" }
            if end > sorted[index + 1].start { return "two segments overlap" }
        }
        return nil
    }
}
