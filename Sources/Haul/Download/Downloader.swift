import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import Synchronization

/// Haul's version, sent in the User-Agent.
public enum HaulVersion {
    public static let current = "0.1.0"
}

/// Starts and tracks resumable downloads: one HTTP client and one store shared by all of them.
///
/// ```swift
/// try await Downloader.withDownloader(configuration: .init(store: .sqlite(at: path))) { downloader in
///     let task = try await downloader.download(DownloadRequest(url: url, destination: .directory("/data")))
///     let result = try await task.result()
/// }
/// ```
/// Every download is recorded in the store with its validators and committed offsets, so a
/// download interrupted by a crash continues from its last checkpoint when asked for again.
public final class Downloader: Sendable {
    /// The store this downloader records into.
    package let store: any TaskStore
    let clients: ClientPool
    private let configuration: Configuration
    private let overallLimiter: RateLimiter
    /// The speed floor of the transfers that start from now on (``setLowestSpeed(_:)``).
    private let speedFloor: Mutex<LowestSpeed?>
    /// The time its transfers measure and wait by (``Configuration/clock``).
    let timeline: Timeline
    /// Where its transfers write what they receive; what it learns of slow writes is shared.
    package let writePlacement: WritePlacement

    /// Opens the store and creates the HTTP client. Call ``shutdown()`` when done, or use
    /// ``withDownloader(configuration:_:)``.
    public init(configuration: Configuration = Configuration()) throws {
        switch configuration.store.kind {
        case .path(let path, let readers): self.store = try Store(path: path, readers: readers)
        case .memory: self.store = try Store.inMemory()
        case .existing(let store): self.store = store
        }
        var http = HTTPClient.Configuration.haul
        // A connection that cannot be made fails its request at once, with its reason, instead
        // of being re-dialled silently until the connect timeout: Haul's own retries (with
        // their backoff, their count and a line saying why) decide what happens next.
        http.connectionPool.retryConnectionEstablishment = false
        // Haul decides how many connections each host gets (``HostConnections``); the pool's
        // own limit (8 by default) would queue a download's request behind the others'
        // connections, unseen: a download called running that receives nothing.
        http.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 2 * DownloadManager.limits.upperBound
        http.timeout = .init(
            connect: .nanoseconds(Int64(configuration.connectTimeout.nanoseconds)),
            read: .nanoseconds(Int64(configuration.readTimeout.nanoseconds))
        )
        self.clients = ClientPool(configuration: http)
        self.configuration = configuration
        self.timeline = Timeline(configuration.clock)
        self.writePlacement = WritePlacement(timeline: timeline)
        self.overallLimiter = RateLimiter(bytesPerSecond: configuration.overallRateLimit, clock: configuration.clock)
        self.speedFloor = Mutex(configuration.lowestSpeed)
    }

    /// Changes the speed each connection must keep (nil for none): transfers that start from
    /// now on keep it; those under way keep the one they started with.
    public func setLowestSpeed(_ floor: LowestSpeed?) {
        speedFloor.withLock { $0 = floor }
    }

    /// The speed each connection of a transfer starting now must keep.
    public var lowestSpeed: LowestSpeed? { speedFloor.withLock { $0 } }

    /// Changes the limit on all downloads together (bytes per second; nil for none), at once.
    public func setOverallRateLimit(_ bytesPerSecond: Int64?) {
        overallLimiter.setRate(bytesPerSecond)
    }

    /// The limit on all downloads together now.
    public var overallRateLimit: Int64? { overallLimiter.bytesPerSecond }

    /// Suggests how many threads this process keeps for blocking file work (syncs, digests, the
    /// writes not made on the connection's own thread): 1 to 16, 16 unless told. Takes effect
    /// only when called before any downloader first touches a file; a program that runs one or
    /// a few downloads at once (as `haul get` does) starts fewer threads, and so starts faster
    /// and keeps less memory. Every count is correct; fewer only queue more work behind a sync.
    public static func suggestFileThreads(_ count: Int) {
        FileIO.suggest(threads: count)
    }

    /// Starts the event loops downloads read their connections on (one thread a core), which
    /// the first downloader would otherwise start: a program that waits for something else
    /// first, as `haul get` waits for the store it opens on another thread, starts them
    /// meanwhile.
    public static func startEventLoops() {
        _ = ClientPool.loops
    }

    /// Runs `body` with a downloader and shuts it down afterwards, whether `body` throws or not.
    @discardableResult
    public static func withDownloader<Result>(
        configuration: Configuration = Configuration(),
        _ body: (Downloader) async throws -> Result
    ) async throws -> Result {
        let downloader = try Downloader(configuration: try await configuration.openingStore())
        do {
            let result = try await body(downloader)
            try await downloader.shutdown()
            return result
        } catch {
            try? await downloader.shutdown()
            throw error
        }
    }

    /// Closes the HTTP client. Running downloads fail with a connection error.
    public func shutdown() async throws {
        try await clients.shutdown()
    }

    /// Starts (or continues) downloading `request.url`.
    ///
    /// A request for the same URL into the same place as an earlier, unfinished one continues
    /// it from its last checkpoint; one whose verified file is still in place completes
    /// without a request.
    /// - Throws: ``HaulError`` at once for a bad URL or an unusable destination directory.
    public func download(_ request: DownloadRequest) async throws -> DownloadTask {
        let prepared = try await prepare(request)
        return start(prepared.record, segments: prepared.segments)
    }

    /// Checks a request and finds its task in the store (the same URL into the same place,
    /// unless cancelled), or records a new one.
    /// - Parameter background: whether the task belongs to the background daemon. A task of
    ///   the daemon that is not finished is not taken over by a foreground process; a
    ///   foreground task is taken over by the daemon when it is asked to run it.
    func prepare(
        _ request: DownloadRequest,
        background: Bool = false
    ) async throws -> (record: TaskRecord, segments: [SegmentRecord], isNew: Bool) {
        try await prepare([request], background: background)[0]
    }

    /// ``prepare(_:background:)`` for many, in one transaction: every request is checked
    /// first, then all are found or recorded, or none.
    /// - Parameters:
    ///   - priority: the priority of the tasks it records (an existing task keeps its own).
    ///   - paused: the tasks it records are recorded paused, in the same transaction, so
    ///     that no runner (another daemon sharing the store) can start one before it is paused.
    ///   - ids: the ids of the tasks it records, one for each request (new ones otherwise):
    ///     the caller knows them before they are in the store.
    func prepare(
        _ requests: [DownloadRequest],
        background: Bool = false,
        priority: Int = 0,
        paused: Bool = false,
        ids: [UUID]? = nil
    ) async throws -> [(record: TaskRecord, segments: [SegmentRecord], isNew: Bool)] {
        let now = Date()
        var checkedDirectories: Set<String> = []
        let ids = ids ?? requests.map { _ in UUID() }
        precondition(ids.count == requests.count, "one id for each request")
        let items = try zip(ids, requests).map { id, request -> (new: TaskRecord, reAdd: TaskReAdd) in
            try request.validate(checkedDirectories: &checkedDirectories)
            var record = TaskRecord(
                id: id,
                url: request.url,
                destination: request.destination,
                explicitName: request.destination.fileName != nil,
                requestHeaders: request.headers,
                checksum: request.checksum,
                overwrite: request.overwrite,
                session: request.session,
                background: background,
                connections: request.connections,
                minSplitSize: request.minSplitSize,
                rateLimit: request.rateLimit,
                now: now
            )
            record.tls = request.tls
            record.proxy = request.proxy
            record.credentials = request.credentials
            record.cookies = request.cookies
            record.allowsMetered = request.allowsMeteredNetwork
            record.checkNewer = request.checkNewer
            record.continuesExisting = request.continuesExistingFile
            record.hooks = request.hooks
            record.sources = request.sources
            record.maxConnectionsPerServer = request.maxConnectionsPerServer
            record.pieces = request.pieceHashes
            record.followsMetalink = request.followsMetalink
            record.priority = priority
            if paused { record.state = .paused }
            let reAdd = TaskReAdd(
                background: background,
                session: request.session,
                requestHeaders: request.headers,
                checksum: request.checksum,
                overwrite: request.overwrite,
                connections: request.connections,
                minSplitSize: request.minSplitSize,
                rateLimit: request.rateLimit,
                tls: request.tls,
                proxy: request.proxy,
                credentials: request.credentials,
                cookies: request.cookies,
                allowsMetered: request.allowsMeteredNetwork,
                checkNewer: request.checkNewer,
                continuesExisting: request.continuesExistingFile,
                hooks: request.hooks
            )
            return (record, reAdd)
        }
        return try await store.findOrInsert(items) { existing in
            // A task of the daemon that is not finished is not taken over by another process.
            guard existing.background, !background, existing.state != .completed else { return }
            throw HaulError(
                .busy,
                "The Haul daemon already has this download (task \(existing.id.shown), \(existing.state))",
                url: existing.url,
                hint:
                    "Follow it with 'haul wait \(existing.id.shown)', or drop it with 'haul remove \(existing.id.shown)' (its partial data is discarded) and run this again"
            )
        }
    }

    /// Continues a download from resume data produced by ``DownloadTask/pause()`` or carried
    /// by a failure, in this process or another.
    /// - Throws: ``HaulError`` when the resume data does not describe a usable download.
    public func download(resumingFrom resumeData: ResumeData) async throws -> DownloadTask {
        let prepared = try await prepare(resumingFrom: resumeData)
        return start(prepared.record, segments: prepared.segments)
    }

    /// Records the task that resume data describes (creating it when this store has never
    /// seen it), with its validators and committed segments.
    func prepare(
        resumingFrom resumeData: ResumeData,
        background: Bool = false
    ) async throws -> (record: TaskRecord, segments: [SegmentRecord]) {
        try DownloadRequest.validate(resumeData.url)
        if let session = resumeData.session { try DownloadRequest.validateSession(session) }
        try FileOps.checkWritableDirectory(resumeData.destination.directory)
        let now = Date()
        var record =
            try await store.task(id: resumeData.taskID)
            ?? TaskRecord(
                id: resumeData.taskID,
                url: resumeData.url,
                destination: resumeData.destination,
                explicitName: false,
                requestHeaders: [],
                checksum: nil,
                overwrite: false,
                now: now
            )
        record.url = resumeData.url
        record.finalURL = resumeData.finalURL
        record.directory = resumeData.destination.directory
        record.fileName = resumeData.destination.fileName
        record.requestHeaders = resumeData.headers
        record.checksum = resumeData.checksum
        if let tls = resumeData.tls {
            try tls.validate()
            record.tls = tls
        }
        record.overwrite = resumeData.overwrite
        record.validators = resumeData.validators
        record.state = .queued
        record.queuedAt = now
        record.background = background
        if let session = resumeData.session { record.session = session }
        if let sources = resumeData.sources, record.sources.isEmpty {
            // From another store: mirrors are checked again against the bytes on disk before
            // they get work (what another process said of them is not taken on trust). This
            // store's own record of them, when it has one, stands.
            record.sources = sources.map { source in
                var source = source
                source.verified = false
                source.validators = nil
                return source
            }
            record.maxConnectionsPerServer = resumeData.maxConnectionsPerServer
        }
        // Piece hashes from another store: recorded with none verified, so every piece is
        // checked here before the file is placed. This store's own, when it has them, stand.
        record.pieces = resumeData.pieces
        // Resume data is only as good as the part file beside it: without the file, start
        // over. (A segment that has nothing yet may start beyond the file's end.)
        var segments = resumeData.segments.enumerated().map { index, segment in
            SegmentRecord(
                taskID: resumeData.taskID,
                ordinal: index,
                start: segment.start,
                end: segment.end,
                committed: segment.committed
            )
        }
        // The part file must lie beside the destination: resume data from elsewhere cannot
        // point the download at any other file.
        if record.partPath == nil, let partPath = resumeData.partPath,
            (partPath as NSString).deletingLastPathComponent == record.directory,
            FileNaming.isPlainName((partPath as NSString).lastPathComponent)
        {
            record.partPath = partPath
        }
        let partSize = record.partPath.flatMap(FileOps.size) ?? 0
        if segments.contains(where: { $0.committed > $0.start && $0.committed > partSize }) {
            segments = [SegmentRecord(taskID: resumeData.taskID, ordinal: 0, start: 0, end: nil, committed: 0)]
            record.validators = Validators()
        }
        try await store.adopt(record, segments: segments)
        return (record, segments)
    }

    /// What every transfer of this downloader shares.
    var environment: TransferEnvironment {
        TransferEnvironment(
            transport: HTTPTransport(
                clients: clients,
                maxRedirects: configuration.maxRedirects,
                userAgent: configuration.userAgent,
                connectTimeout: configuration.connectTimeout,
                readTimeout: configuration.readTimeout
            ),
            store: store,
            checkpointInterval: configuration.checkpointInterval,
            checkpointBytes: configuration.checkpointBytes,
            retry: configuration.retry,
            connections: configuration.connectionsPerDownload,
            minSplitSize: configuration.minSplitSize,
            globalLimiter: overallLimiter,
            lowestSpeed: lowestSpeed,
            setsRemoteTime: configuration.setsRemoteTime,
            setsOriginAttribute: configuration.setsOriginAttribute,
            timeline: timeline,
            writePlacement: writePlacement,
            logger: configuration.logger
        )
    }

    /// Runs a recorded task on the execution path every download takes
    /// (``TransferHandles/execute(_:segments:environment:)``, as a ``DownloadManager`` does).
    private func start(_ record: TaskRecord, segments: [SegmentRecord]) -> DownloadTask {
        let environment = self.environment
        return DownloadTask(id: record.id, rateLimit: record.rateLimit, clock: timeline.clock) { handles in
            try await handles.execute(record, segments: segments, environment: environment).get()
        }
    }
}

extension Duration {
    var nanoseconds: Int64 {
        components.seconds * 1_000_000_000 + components.attoseconds / 1_000_000_000
    }
}

extension Downloader.Configuration {
    /// This configuration with its SQLite store opened on NIO's thread pool (see
    /// ``Store/opened(at:readers:)``), so creating the downloader does not block an async caller.
    func openingStore() async throws -> Downloader.Configuration {
        guard case .path(let path, let readers) = store.kind else { return self }
        var opened = self
        opened.store = .store(try await Store.opened(at: path, readers: readers))
        return opened
    }
}
