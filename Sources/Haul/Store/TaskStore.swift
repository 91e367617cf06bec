import Foundation

/// What downloads need from storage: tasks, their segments and checkpoints, piece hashes,
/// part files, states, and the saved settings. Every ``Downloader`` and ``DownloadManager``
/// records through one of these.
///
/// Two engines: ``Store`` (SQLite, through GRDB), the embedded default, and PostgreSQL, which
/// daemons on several machines share (the HaulPostgres target, which `haul get` and library
/// users who never use it do not link). Each requirement is one intent of docs/architecture.md's store rules — a
/// transaction of its own, touching only the columns of its group — and each engine keeps
/// those rules: an engine is swapped in, never a rule. What does not depend on the engine
/// (reading saved settings back, checking a layout of segments) lives in the extension
/// below, once.
package protocol TaskStore: AnyObject, Sendable {
    // MARK: Reading

    /// A task by its id.
    func task(id: UUID) async throws -> TaskRecord?
    /// The tasks of `ids` that exist, in queue order, in one read.
    func tasks(ids: [UUID]) async throws -> [TaskRecord]
    /// What a run of a task reads first: the task with its piece hashes
    /// (``TaskRecord/storedPieces``), and its segments (checked), in one read.
    func taskForRun(_ id: UUID) async throws -> (TaskRecord, [SegmentRecord])?
    /// The tasks of `ids` that exist, in one read, each with what a run of it reads first
    /// (``taskForRun(_:)``): its segments (checked) and piece hashes — segments nil when they
    /// are not read here or cannot be used (the run then reads the task itself, and is told
    /// why). A shared queue's claims start from it.
    func tasksForRun(ids: [UUID]) async throws -> [(task: TaskRecord, segments: [SegmentRecord]?)]
    /// A task and its segments (checked), read together.
    func taskWithSegments(_ id: UUID) async throws -> (TaskRecord, [SegmentRecord])?
    /// Tasks in any of `states`, in queue order; with `background`, only the daemon's or only
    /// the others; those past queue order `after`, at most `limit` of them (a page, read from
    /// the queue order's index) when given.
    func tasks(inStates states: [TaskState], background: Bool?, after: Int64?, limit: Int?) async throws -> [TaskRecord]
    /// Every task (or those named), with its committed bytes, in queue order.
    func infos(ids: [UUID]?, background: Bool?, session: String?) async throws -> [DownloadInfo]
    /// A page of them (``TaskPage``), read from the queue order's index.
    /// - Throws: ``HaulError/Code/notFound`` when the page's `after` task no longer exists.
    func infos(page: TaskPage, background: Bool?, session: String?) async throws -> [DownloadInfo]
    /// A task's piece hashes and verified pieces, nil when it has none.
    func pieces(of id: UUID) async throws -> StoredPieces?
    /// Whether another task than `id` records `path` as its part file.
    func isPartPathTaken(_ path: String, byOtherThan id: UUID) async throws -> Bool

    // MARK: Writing

    /// Finds the unfinished-or-completed task for each new one's URL and destination and
    /// applies its re-add, or inserts the new one with one empty segment: all in one
    /// transaction, in order, so adds racing anywhere never create two.
    func findOrInsert(
        _ items: [(new: TaskRecord, reAdd: TaskReAdd)],
        accept: @escaping @Sendable (TaskRecord) throws -> Void
    ) async throws -> [(record: TaskRecord, segments: [SegmentRecord], isNew: Bool)]
    /// Records a task re-created from resume data, every group at once.
    func adopt(_ task: TaskRecord, segments: [SegmentRecord]) async throws
    /// Records what a transfer learnt from a response and replaces the segments, in one
    /// transaction; returns whether `part` was claimed.
    @discardableResult
    func saveResponse(
        _ task: TaskRecord,
        segments: [SegmentRecord],
        claimingPart part: (path: String, identity: String?)?,
        recordingRunning: Bool
    ) async throws -> Bool
    /// Records the segments with their committed offsets (and sources, verified pieces,
    /// completion), in one transaction, after the part file was synced up to them.
    func checkpoint(
        _ id: UUID,
        segments: [SegmentRecord],
        sources: [DownloadSource]?,
        verifiedPieces: [UInt8]?,
        completing: Bool
    ) async throws
    /// Records the part file a task created.
    func setPart(_ id: UUID, path: String?, identity: String?) async throws
    /// Records `path` as the part file of task `id` unless another task records it.
    func claimPart(_ id: UUID, path: String, identity: String?) async throws -> Bool
    /// Records the rate limit of tasks.
    func setRateLimit(_ bytesPerSecond: Int64?, for ids: [UUID]) async throws
    /// Records a state (and the error, for a failure).
    func setState(
        _ id: UUID,
        _ state: TaskState,
        error: String?,
        code: HaulError.Code?,
        forgettingPart: Bool
    ) async throws
    /// Records that a task waits to try again at `nextTryAt`.
    func setRetrying(_ id: UUID, error: String, nextTryAt: Date, since: Date) async throws
    /// Removes a task with its segments and pieces.
    func delete(_ id: UUID) async throws
    /// Puts a task in the waiting line in `state`; returns its position there. With `keepingPlace`, the task keeps its queue order (a resumed task goes back to where
    /// it was in the line and in lists, as aria2's unpause does); else it goes to the back.
    func requeue(_ id: UUID, state: TaskState, keepingPlace: Bool) async throws -> Int64
    /// Records a task's URL and sources (its mirrors; none for one URL alone).
    func setSources(_ id: UUID, url: URL, sources: [DownloadSource]) async throws
    /// Gives `ids` the places in the queue they hold between them, in the order given.
    func reorder(_ ids: [UUID]) async throws -> [UUID: Int64]
    func setPriority(_ id: UUID, _ priority: Int) async throws
    /// Forgets which of a task's pieces are verified (its file starts over).
    func clearVerifiedPieces(of id: UUID) async throws

    // MARK: Settings

    /// The numeric settings as saved, by name (``storedLimits()`` reads them).
    func numericSettings() async throws -> [(name: String, value: Int64?)]
    /// Saves numeric settings together (one transaction), replacing those of the same names.
    func saveNumericSettings(_ values: [(name: String, value: Int64)]) async throws
    /// A text setting as saved, or nil.
    func textSetting(_ name: String) async throws -> String?
    func saveTextSetting(_ name: String, _ value: String) async throws

    /// Ends the store's use: nothing is written after this returns; later uses fail.
    func closeDatabase() async throws
}

// MARK: - What does not depend on the engine

extension TaskStore {
    /// The tasks alone: each run reads its own.
    package func tasksForRun(ids: [UUID]) async throws -> [(task: TaskRecord, segments: [SegmentRecord]?)] {
        try await tasks(ids: ids).map { ($0, nil) }
    }

    /// Moves a task to the back of the waiting line in `state`; returns its new position.
    func requeue(_ id: UUID, state: TaskState) async throws -> Int64 {
        try await requeue(id, state: state, keepingPlace: false)
    }

    func setState(_ id: UUID, _ state: TaskState, error: String? = nil, code: HaulError.Code? = nil) async throws {
        try await setState(id, state, error: error, code: code, forgettingPart: false)
    }

    func checkpoint(_ id: UUID, segments: [SegmentRecord]) async throws {
        try await checkpoint(id, segments: segments, sources: nil, verifiedPieces: nil, completing: false)
    }

    @discardableResult
    func saveResponse(_ task: TaskRecord, segments: [SegmentRecord]) async throws -> Bool {
        try await saveResponse(task, segments: segments, claimingPart: nil, recordingRunning: false)
    }

    /// Finds or inserts one task (``findOrInsert(_:accept:)`` for one).
    func findOrInsert(
        _ new: TaskRecord,
        reAdd: TaskReAdd,
        accept: @escaping @Sendable (TaskRecord) throws -> Void
    ) async throws -> (record: TaskRecord, segments: [SegmentRecord], isNew: Bool) {
        try await findOrInsert([(new, reAdd)], accept: accept)[0]
    }

    /// Every task in any of `states`, or only the daemon's (`background`), in queue order.
    func tasks(inStates states: [TaskState], background: Bool? = nil) async throws -> [TaskRecord] {
        try await tasks(inStates: states, background: background, after: nil, limit: nil)
    }

    /// A task's segments, checked like the task (empty when there is no such task).
    func segments(of id: UUID) async throws -> [SegmentRecord] {
        try await taskWithSegments(id)?.1 ?? []
    }

    /// The limits saved by ``saveLimits(_:)``. A stored value that is out of range (edited,
    /// or written by a broken version) is left out and named in `rejected`, so the caller
    /// can say so and use its default.
    package func storedLimits() async throws -> (limits: StoredLimits, rejected: [String]) {
        StoredLimits.reading(try await numericSettings())
    }

    /// Saves the fields of `limits` that are set, together (one transaction).
    package func saveLimits(_ limits: StoredLimits) async throws {
        try await saveNumericSettings(limits.storedValues)
    }

    /// The metered interface patterns last saved, or nil (the defaults); a stored value
    /// that is not a valid list is ignored (nil).
    package func storedMeteredInterfaces() async throws -> [String]? {
        guard let text = try await textSetting("meteredInterfaces"),
            let list = try? JSONDecoder().decode([String].self, from: Data(text.utf8)),
            (try? NetworkPolicy(meteredInterfaces: list).validate()) != nil
        else { return nil }
        return list
    }

    /// Saves the metered interface patterns.
    package func saveMeteredInterfaces(_ patterns: [String]) async throws {
        try await saveTextSetting(
            "meteredInterfaces",
            String(decoding: try JSONEncoder().encode(patterns), as: UTF8.self)
        )
    }
}

/// What one checkpoint records: the segments with their committed offsets, and the sources
/// and verified pieces when they changed (nil: unchanged).
package struct CheckpointRecord: Sendable {
    package var segments: [SegmentRecord]
    package var sources: [DownloadSource]?
    package var verifiedPieces: [UInt8]?

    package init(segments: [SegmentRecord], sources: [DownloadSource]?, verifiedPieces: [UInt8]?) {
        self.segments = segments
        self.sources = sources
        self.verifiedPieces = verifiedPieces
    }
}

/// What the store keeps of a task's pieces (table `piece`).
package struct StoredPieces: Sendable, Equatable {
    package var hashes: PieceHashes
    /// One bit per piece; nil for none verified.
    package var verified: [UInt8]?

    /// The pieces a row holds, checked as any row from outside: a row that cannot be piece
    /// hashes (another algorithm, a length out of bounds, digests cut short) is an unreadable
    /// store; a bitmap of the wrong size counts as nothing verified (the pieces are checked again).
    package init(task id: UUID, algorithm name: String?, length: Int64?, digests: [UInt8]?, verified: [UInt8]?) throws {
        guard let name, let algorithm = Checksum.Algorithm(named: name), let length,
            let digests, let hashes = PieceHashes(algorithm: algorithm, length: length, digests: digests)
        else {
            throw HaulError(
                .store,
                "Task \(id.shown) in the Haul store cannot be read: its piece hashes are not piece hashes",
                hint: "Remove it with 'haul remove \(id.shown)', or point HAUL_HOME at another directory"
            )
        }
        self.hashes = hashes
        self.verified = verified.flatMap { $0.count == (hashes.count + 7) / 8 ? $0 : nil }
    }

    package init(hashes: PieceHashes, verified: [UInt8]?) {
        self.hashes = hashes
        self.verified = verified
    }
}

/// What adding a download again changes on the task that has it: the request's own
/// columns. Never its state, validators or segments, which a running transfer owns.
package struct TaskReAdd: Sendable {
    package var background: Bool
    package var session: String
    package var requestHeaders: [HTTPHeaderField]
    package var checksum: Checksum?
    package var overwrite: Bool
    package var connections: Int?
    package var minSplitSize: Int64?
    package var rateLimit: Int64?
    package var tls: TLSOptions
    package var proxy: ProxySettings
    package var credentials: Credentials
    package var cookies: CookieOptions
    package var allowsMetered: Bool
    package var checkNewer: Bool
    package var continuesExisting: Bool
    package var hooks: Hooks

    /// Applies the re-add to `task`'s request columns.
    package func apply(to task: inout TaskRecord) {
        task.background = background
        task.session = session
        task.requestHeaders = requestHeaders
        task.checksum = checksum
        task.overwrite = overwrite
        task.connections = connections
        task.minSplitSize = minSplitSize
        task.rateLimit = rateLimit
        task.tls = tls
        task.proxy = proxy
        task.credentials = credentials
        task.cookies = cookies
        task.allowsMetered = allowsMetered
        task.checkNewer = checkNewer
        task.continuesExisting = continuesExisting
        task.hooks = hooks
    }
}

extension SegmentRecord {
    /// The segments a task's rows hold, in order, checked: a layout no transfer could have
    /// written is an error naming the task. A task without any starts from byte 0.
    package static func checked(_ segments: [SegmentRecord], of task: TaskRecord) throws -> [SegmentRecord] {
        if segments.isEmpty { return [SegmentRecord(taskID: task.id, ordinal: 0, start: 0, committed: 0)] }
        let layout = segments.map { (start: $0.start, end: $0.end, committed: $0.committed) }
        if let problem = layoutProblem(layout, totalLength: task.totalLength) {
            throw HaulError(
                .store,
                "Task \(task.id.shown) in the Haul store cannot be read: its segments are unusable (\(problem))",
                hint: "Remove it with 'haul remove \(task.id.shown)', or point HAUL_HOME at another directory"
            )
        }
        return segments
    }
}

extension DownloadInfo {
    /// A listing's row as an engine read it, checked as any value from outside: a URL, a
    /// state or sources that are not what Haul writes are an error naming the task.
    package init(
        storedID id: UUID,
        url: String,
        directory: String,
        fileName: String?,
        state: String,
        priority: Int,
        totalLength: Int64?,
        errorMessage: String?,
        committed: Int64,
        session: String,
        rateLimit: Int64?,
        connections: Int?,
        nextTryAt: Date?,
        errorCode: String?,
        sources: String?,
        node: String? = nil
    ) throws {
        guard let parsed = URL(string: url) else {
            throw HaulError(.store, "Task \(id.shown) in the Haul store cannot be read: its url is not a URL")
        }
        guard let taskState = TaskState(rawValue: state) else {
            throw HaulError(
                .store,
                "Task \(id.shown) in the Haul store cannot be read: its state '\(state)' is not a state"
            )
        }
        var decodedSources: [DownloadSource] = []
        if let sources {
            do {
                decodedSources = try JSONDecoder().decode([DownloadSource].self, from: Data(sources.utf8))
                try DownloadSource.validate(decodedSources)
            } catch {
                throw HaulError(
                    .store,
                    "Task \(id.shown) in the Haul store cannot be read: its sources is not a list of sources"
                )
            }
        }
        self.init(
            id: id,
            url: parsed,
            path: fileName.map { (directory as NSString).appendingPathComponent($0) },
            directory: directory,
            state: taskState,
            priority: priority,
            bytesCommitted: committed,
            totalBytes: totalLength,
            errorMessage: errorMessage,
            session: session,
            rateLimit: rateLimit,
            connections: connections,
            nextTryAt: nextTryAt,
            errorCode: errorCode.flatMap(HaulError.Code.init(name:))
        )
        self.sources = decodedSources
        self.node = node
    }
}
