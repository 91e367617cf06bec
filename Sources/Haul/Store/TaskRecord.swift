import Foundation
import GRDB
import Synchronization

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
    package init(row: Row) throws { try self.init(row: row, positions: nil) }

    /// A task from `row`, whose columns are found by name, or at `positions` (by name).
    init(row: Row, positions: [String: Int]?) throws {
        let reader = try TaskRowReader(row: row, positions: positions)
        id = reader.taskID
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
        for (column, value) in zip(TaskRecord.storedColumns, try storedValues()) { container[column] = value }
    }

    /// Every column a row holds, in the order of ``storedValues()``: the one list a new
    /// row's statement (``TaskTables/insert(_:_:)``) and GRDB's record writes both use.
    package static let storedColumns: [Column] = [
        Columns.id,
        Columns.session,
        Columns.url,
        Columns.finalURL,
        Columns.directory,
        Columns.fileName,
        Columns.explicitName,
        Columns.requestHeaders,
        Columns.checksum,
        Columns.overwrite,
        Columns.state,
        Columns.priority,
        Columns.etag,
        Columns.lastModified,
        Columns.serverDate,
        Columns.totalLength,
        Columns.createdAt,
        Columns.queuedAt,
        Columns.updatedAt,
        Columns.errorMessage,
        Columns.queueOrder,
        Columns.background,
        Columns.connections,
        Columns.minSplitSize,
        Columns.rateLimit,
        Columns.partPath,
        Columns.partIdentity,
        Columns.tls,
        Columns.proxy,
        Columns.credentials,
        Columns.cookies,
        Columns.nextTryAt,
        Columns.allowsMetered,
        Columns.checkNewer,
        Columns.continuesExisting,
        Columns.hooks,
        Columns.sources,
        Columns.maxConnectionsPerServer,
        Columns.retryingSince,
        Columns.followsMetalink,
    ]

    /// The row's values, in the order of ``storedColumns``.
    package func storedValues() throws -> [(any DatabaseValueConvertible)?] {
        [
            id,
            session,
            url.absoluteString,
            finalURL?.absoluteString,
            directory,
            fileName,
            explicitName,
            try TaskRecord.text(of: requestHeaders),
            checksum?.description,
            overwrite,
            state.rawValue,
            priority,
            etag,
            lastModified,
            serverDate,
            totalLength,
            StoreDate.text(createdAt),
            StoreDate.text(queuedAt),
            StoreDate.text(updatedAt),
            errorMessage,
            queueOrder,
            background,
            connections,
            minSplitSize,
            rateLimit,
            partPath,
            partIdentity,
            try TaskRecord.text(of: tls),
            try TaskRecord.text(of: proxy),
            credentials == .none ? nil : try TaskRecord.json(credentials),
            cookies == .standard ? nil : try TaskRecord.json(cookies),
            nextTryAt.map(StoreDate.text),
            allowsMetered,
            checkNewer,
            continuesExisting,
            hooks == .none ? nil : try TaskRecord.json(hooks),
            sources.isEmpty ? nil : try TaskRecord.json(sources),
            maxConnectionsPerServer,
            retryingSince.map(StoreDate.text),
            followsMetalink,
        ]
    }

    /// TLS options as their column holds them: NULL for the defaults, else a JSON object
    /// with sorted keys.
    package static func text(of tls: TLSOptions) throws -> String? {
        guard !tls.isDefault else { return nil }
        // The daemon gives every download without its own the same options (the system's
        // certificates): encoded once, not once a task.
        if let last = lastTLSText.withLock({ $0 }), last.options == tls { return last.text }
        let text = try json(tls)
        lastTLSText.withLock { $0 = (tls, text) }
        return text
    }

    private static let lastTLSText = Mutex<(options: TLSOptions, text: String)?>(nil)

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
