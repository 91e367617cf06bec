import Foundation

/// One run's store writes: the task and its segments as the run holds them, and every write
/// that changes them in the store. Each write changes the record here only once the store
/// took it, so a later save of the task (validators, segments) never writes back a stale
/// state, and a refused write leaves the run's view as the store has it. The checkpoints
/// of a run's connections are the ``Checkpointer``'s; everything else a run records is here.
final class RunRecorder {
    private(set) var task: TaskRecord
    private(set) var segments: [SegmentRecord]
    let store: any TaskStore
    /// Set while the run's "running" is to be recorded with its first response (a new
    /// download): one transaction instead of two. Until then the store says queued, which a
    /// crash or a failure before any answer leaves just as well.
    private(set) var runningUnrecorded = false

    init(task: TaskRecord, segments: [SegmentRecord], store: any TaskStore) {
        self.task = task
        self.segments = segments
        self.store = store
    }

    /// Bytes durably on disk in all segments, as last recorded.
    var committedBytes: Int64 { segments.reduce(0) { $0 + ($1.committed - $1.start) } }

    /// Changes the run's view of the task without a write: what a later save records (the
    /// final URL, a chosen file name, the sources' standing).
    func update(_ change: (inout TaskRecord) -> Void) { change(&task) }

    /// The segments a run of the connections left, as its checkpointer recorded them.
    func adoptSegments(_ recorded: [SegmentRecord]) { segments = recorded }

    /// Leaves "running" to be recorded with the first response.
    func deferRunning() { runningUnrecorded = true }

    /// Records a state, in the store and here.
    /// - Parameter forgettingPart: the part file is gone (moved into place); its record goes too.
    func record(
        _ state: TaskState,
        error: String? = nil,
        code: HaulError.Code? = nil,
        forgettingPart: Bool = false
    ) async throws {
        let (store, id) = (store, task.id)
        try await uncancellable {
            try await store.setState(id, state, error: error, code: code, forgettingPart: forgettingPart)
        }
        completed(state, error: error)
        if forgettingPart { forgetPartRecord() }
    }

    /// Notes a state the store recorded by another write (the last checkpoint's, with completion).
    func completed(_ state: TaskState, error: String? = nil) {
        task.state = state
        task.errorMessage = error
    }

    /// Records what the server said of the file (its validators, length, final URL and name)
    /// with `segments`, in one transaction.
    func saveResponse(segments newSegments: [SegmentRecord]? = nil) async throws {
        try await save(task, segments: newSegments ?? segments)
    }

    /// Records `next` with `segments`, then takes both as the run's.
    private func save(_ next: TaskRecord, segments: [SegmentRecord]) async throws {
        try await store.saveResponse(next, segments: segments)
        task = next
        self.segments = segments
    }

    /// Records a length learnt at the end of a stream (or with a range), as the file's.
    func settleLength(_ length: Int64) async throws {
        var (next, segments) = (task, segments)
        next.totalLength = length
        segments[0].end = length
        try await save(next, segments: segments)
    }

    /// Records a start from byte 0 of the file `validators` describe: one segment, nothing
    /// committed, in one transaction (with the run's "running" when it is due).
    /// - Parameter made: a part file just made for the first response, claimed in the same
    ///   transaction. Returns whether the claim held (another task's record may name it).
    func startFromZero(
        validators: Validators,
        sources: [DownloadSource]?,
        claiming made: PartFile?
    ) async throws -> Bool {
        var next = task
        next.validators = validators
        if let sources { next.sources = sources }
        let zero = [SegmentRecord(taskID: task.id, ordinal: 0, start: 0, end: validators.totalLength, committed: 0)]
        let claimed = try await store.saveResponse(
            next,
            segments: zero,
            claimingPart: made.map { ($0.path, $0.identity) },
            recordingRunning: runningUnrecorded
        )
        (task, segments) = (next, zero)
        if runningUnrecorded {
            runningUnrecorded = false
            completed(.running)
        }
        if let made, claimed { notePart(made) }
        return claimed
    }

    /// Records a file found complete and up to date at the destination (`-N`) as the task's.
    func keepExisting(size: Int64, modified: Date) async throws {
        var next = task
        next.totalLength = size
        next.validators = Validators(lastModified: HTTPDate.format(modified), totalLength: size)
        try await save(
            next,
            segments: [
                SegmentRecord(taskID: task.id, ordinal: 0, start: 0, end: size, committed: size)
            ]
        )
    }

    /// Records a file Haul did not download as the beginning of this one (`--continue`):
    /// its part file, then its validators and every byte committed.
    func continueFrom(_ file: PartFile, validators: Validators, committed: Int64) async throws {
        try await store.setPart(task.id, path: file.path, identity: file.identity)
        notePart(file)
        var next = task
        next.validators = validators
        try await save(
            next,
            segments: [
                SegmentRecord(taskID: task.id, ordinal: 0, start: 0, end: validators.totalLength, committed: committed)
            ]
        )
    }

    /// Checks `file`'s name is no other task's and records it as this task's, in one transaction.
    func claimPart(_ file: PartFile) async throws -> Bool {
        try await store.claimPart(task.id, path: file.path, identity: file.identity)
    }

    /// Notes the part file the store has recorded as this task's.
    func notePart(_ file: PartFile) {
        task.partPath = file.path
        task.partIdentity = file.identity
    }

    /// Forgets the part file once it is gone (moved into place or deleted), in the store too.
    func forgetPart() async throws {
        let (store, id) = (store, task.id)
        try await uncancellable { try await store.setPart(id, path: nil, identity: nil) }
        forgetPartRecord()
    }

    private func forgetPartRecord() {
        task.partPath = nil
        task.partIdentity = nil
    }

    /// Whether another task's record names `path` as its part file.
    func isTaken(_ path: String) async throws -> Bool {
        try await store.isPartPathTaken(path, byOtherThan: task.id)
    }

    /// What resumes this download elsewhere: the task, its segments and its piece hashes.
    func resumeData(pieces: RunPieces?) -> ResumeData {
        var data = ResumeData(record: task, segments: segments)
        if let pieces { data.pieces = pieces.stored.hashes }
        return data
    }
}

/// Runs `body` to the end even when the calling task is cancelled: the bookkeeping after a
/// pause (the last checkpoint, the state) must still reach the store.
func uncancellable<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await Task { try await body() }.value
}
