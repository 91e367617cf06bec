import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import Synchronization

/// Why a running transfer was asked to stop.
enum StopReason: Sendable, Equatable {
    /// The user paused it: it keeps its data and waits to be resumed.
    case pause
    /// The scheduler took its slot (a lower limit, or shutdown): it keeps its data and queues again.
    case yield
    /// The user cancelled it: its data goes.
    case cancel
}

/// The switch that stops a transfer. The first request wins; ``waitForStop()`` returns
/// once there is one, so whoever runs the transfer can cancel it and let it conclude.
final class TransferControl: Sendable {
    private let reason = Mutex<StopReason?>(nil)
    private let signal: AsyncStream<Void>
    private let signalSink: AsyncStream<Void>.Continuation

    init() {
        (signal, signalSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func request(_ stop: StopReason) {
        let first = reason.withLock { reason -> Bool in
            guard reason == nil else { return false }
            reason = stop
            return true
        }
        if first {
            signalSink.yield()
            signalSink.finish()
        }
    }

    var requested: StopReason? { reason.withLock { $0 } }

    /// Returns when a stop is requested, or when the calling task is cancelled.
    func waitForStop() async {
        for await _ in signal { return }
    }
}

/// What a transfer needs from its downloader.
struct TransferEnvironment: Sendable {
    var transport: HTTPTransport
    var store: Store
    var checkpointInterval: Duration
    var checkpointBytes: Int64
    var retry: RetryPolicy
    /// Connections per download when the request does not say.
    var connections: Int
    /// The smallest segment worth its own connection.
    var minSplitSize: Int64
    /// The limit all downloads of the downloader share.
    var globalLimiter: RateLimiter
    /// The most connections any one download may open (the manager's per-host cap).
    var connectionCap = Int.max
    var logger: Logger
}

/// One download, from the first request to the verified file in place.
///
/// It owns the part file and the task's records while it runs; nothing else touches them.
/// The flow and the correctness rules are those of docs/design.md: validators remembered from
/// the first response, `If-Range` on every resume, every 206 checked against what was
/// asked for, a 200 written from offset 0 on the same response, checkpoints made of
/// `fdatasync` then the committed offset in the store, verification before the atomic
/// rename.
final class Transfer {
    private var task: TaskRecord
    private var segments: [SegmentRecord]
    private let environment: TransferEnvironment
    private let progress: ProgressBox
    private let control: TransferControl
    private let limiter: RateLimiter
    private var logger: Logger
    private var part: PartFile?
    private var restarts = 0
    /// False when the server never gave the length and its end could not be confirmed.
    private var lengthConfirmed = true

    /// Restarts from zero allowed (a changed or inconsistent representation) before giving up.
    static let maxRestarts = 3
    /// Bytes re-read and compared before every resume point (rule 7). Without a validator
    /// they are the only check; with one they still catch validators that do not change
    /// when the bytes do — nginx's ETag is the mtime in whole seconds and the size, so a
    /// same-size file rewritten within the same second keeps it, and `If-Range` alone
    /// would append the new version's tail to the old head.
    static let overlapLength: Int64 = 64 * 1024

    init(
        task: TaskRecord,
        segments: [SegmentRecord],
        environment: TransferEnvironment,
        progress: ProgressBox,
        control: TransferControl,
        limiter: RateLimiter
    ) {
        self.task = task
        self.segments = segments
        self.environment = environment
        self.progress = progress
        self.control = control
        self.limiter = limiter
        var logger = environment.logger
        logger[metadataKey: "haul.task"] = "\(task.id)"
        self.logger = logger
    }

    private var url: URL { URL(string: task.url)! }
    private var requestHeaders: [HTTPHeaderField] {
        (try? JSONDecoder().decode([HTTPHeaderField].self, from: Data(task.requestHeaders.utf8))) ?? []
    }
    private var checksum: Checksum? { task.checksum.flatMap { try? Checksum(parsing: $0) } }
    private var store: Store { environment.store }
    /// Bytes durably on disk in all segments.
    private var committedBytes: Int64 { segments.reduce(0) { $0 + ($1.committed - $1.start) } }
    /// Connections for this download.
    private var connections: Int {
        if rangesDeclined { return 1 }
        return max(1, min(task.connections ?? environment.connections, environment.connectionCap))
    }
    /// Set once the server answered a range request with the same file whole: it will not
    /// serve ranges (to this client, with this `If-Range`), so this run stops splitting.
    private var rangesDeclined = false

    // MARK: Running

    /// Runs the download to the end: the verified file in place, or an error.
    func run() async throws -> DownloadResult {
        let started = ContinuousClock.now
        do {
            if let done = try await alreadyComplete() { return done }
            try checkDestinationFree()
            // Take the part file's lock before touching the task's records, so a second
            // process asked for the same download stops here and changes nothing.
            if task.destinationPath != nil { _ = try await openPart() }
            try await record(.running)
            progress.update {
                $0.fileName = task.fileName
                $0.totalBytes = task.totalLength
                $0.bytesReceived = committedBytes
                $0.resumedFrom = committedBytes > 0 ? committedBytes : nil
            }
            try await transferWithRetries()
            let result = try await finish(started: started)
            return result
        } catch {
            throw await conclude(after: error)
        }
    }

    /// A task completed earlier whose file is still in place completes again without a request.
    /// So does one that crashed between moving its verified file into place and recording
    /// that: every byte was committed, the part file is gone, and a file of exactly that
    /// length is at the destination.
    private func alreadyComplete() async throws -> DownloadResult? {
        guard !task.overwrite, let destination = task.destinationPath, let size = FileOps.size(destination) else {
            return nil
        }
        let recorded = task.state == TaskState.completed.rawValue && size == task.totalLength ?? size
        let renamedBeforeCrash =
            task.totalLength == size && committedBytes == size
            && !FileOps.exists(task.partPath ?? destination + ".part")
        guard recorded || renamedBeforeCrash else { return nil }
        if let checksum {
            // Reading the whole file: on FileIO, like the digest before the rename.
            let algorithm = checksum.algorithm
            let digest = try await FileIO.run {
                let file = try PartFile(readingAt: destination)
                defer { file.close() }
                return try file.digest(algorithm, length: size)
            }
            guard digest == checksum.hex else { return nil }
        }
        logger.info("already complete", metadata: ["path": "\(destination)"])
        if !recorded { try await record(.completed) }
        progress.update {
            $0.fileName = task.fileName
            $0.totalBytes = size
            $0.bytesReceived = size
        }
        return DownloadResult(
            taskID: task.id,
            path: destination,
            bytes: size,
            bytesFetched: 0,
            resumedFrom: nil,
            alreadyComplete: true
        )
    }

    /// Refuses to replace a file that is already at the destination unless asked to.
    private func checkDestinationFree() throws {
        guard !task.overwrite, let destination = task.destinationPath, FileOps.exists(destination) else { return }
        throw HaulError.destinationExists(destination, url: url)
    }

    private func transferWithRetries() async throws {
        var failures = 0
        var given: HTTPTransport.Response?
        // Progress is reaching further than ever in this run: a server that breaks off every
        // whole-file response at the same point makes none, though each one writes bytes.
        var furthest = committedBytes
        func progressed() -> Bool {
            guard committedBytes > furthest else { return false }
            furthest = committedBytes
            return true
        }
        while true {
            do {
                try await attempt(given: given)
                return
            } catch let restart as Restart {
                given = restart.response
                if let response = restart.response, isSameFile(response) {
                    // Rule 5 without a change: the server ignored the range and sent the same
                    // file whole. Written from byte 0, but it is a retry, not a new version.
                    if progressed() { failures = 0 }
                    failures += 1
                    guard failures <= environment.retry.maxRetries else {
                        var error =
                            restart.after
                            ?? HaulError(.connection, "The server kept breaking off \(task.url)", url: url)
                        error.hint =
                            "Gave up after \(environment.retry.maxRetries) retries (the server ignores ranges, so each starts from 0)"
                        throw error
                    }
                    logger.notice("the server ignored the range; writing its whole response from byte 0 on one connection")
                    rangesDeclined = true
                    try await resetToZero(validators: Validators())
                    continue
                }
                restarts += 1
                guard restarts <= Transfer.maxRestarts else {
                    throw HaulError(
                        .representationChanged,
                        "The file at \(task.url) kept changing during the download (\(restart.reason))",
                        url: url,
                        hint: "Try again later"
                    )
                }
                logger.notice("restarting from 0", metadata: ["reason": "\(restart.reason)"])
                try await resetToZero(validators: Validators())
            } catch let error as HaulError where error.isRetryable && control.requested == nil {
                given = nil
                if progressed() { failures = 0 }
                failures += 1
                guard failures <= environment.retry.maxRetries else {
                    var error = error
                    error.hint =
                        "Gave up after \(environment.retry.maxRetries) retries; run the same command again to resume"
                    throw error
                }
                let delay = try environment.retry.delay(retrying: error, attempt: failures)
                logger.notice(
                    "retrying",
                    metadata: ["attempt": "\(failures)", "delay": "\(delay)", "error": "\(error.message)"]
                )
                try await progress.waiting(delay, after: error)
            }
        }
    }

    /// Whether a 200 to a range request shows the same file (validators and length agree),
    /// so the server merely ignored the range.
    private func isSameFile(_ response: HTTPTransport.Response) -> Bool {
        guard response.status == 200, let total = task.totalLength,
            Self.contentLength(response.headers) == total
        else { return false }
        return task.validators.contradiction(response.headers) == nil
    }

    // MARK: One attempt

    /// One pass over the download: a first request (or the 200 a restart brought), then the
    /// connections. A download already split into several segments goes straight to its
    /// connections, each asking for its own range.
    private func attempt(given: HTTPTransport.Response?) async throws {
        if given == nil, segments.count > 1, task.totalLength != nil, task.validators.ifRangeValue != nil {
            // Segments with nothing committed may start beyond the part file's end.
            if try await openPart().size() < segments.filter({ $0.committed > $0.start }).map(\.committed).max() ?? 0 {
                logger.warning("part file shorter than its checkpoints; starting over")
                try await resetToZero(validators: task.validators)
            } else {
                let plan = SegmentPlan(segments, minSplit: minSplitSize)
                plan.spread(over: connections)
                try await runConnections(plan: plan, first: nil)
                return
            }
        }
        var confirming = false
        while let first = try await firstResponse(given: confirming ? nil : given, confirming: confirming) {
            let plan = SegmentPlan(segments, minSplit: minSplitSize)
            plan.own(0)
            if connections > 1, task.validators.ifRangeValue != nil, task.totalLength != nil,
                first.response.status == 206 || first.response.headers.first(name: "Accept-Ranges") == "bytes"
            {
                plan.split(0, into: connections)
            }
            try await runConnections(plan: plan, first: first)
            // A body of unknown length ended with its connection: a clean close looks the same
            // as a cut one, so ask the server whether anything follows (rule 8).
            guard task.totalLength == nil else { return }
            confirming = true
        }
    }

    private var minSplitSize: Int64 { max(64 * 1024, task.minSplitSize ?? environment.minSplitSize) }

    /// Sends the first request of an attempt (open-ended, from the committed offset) and
    /// applies the single-stream rules to its answer. Returns nil when nothing is left to fetch.
    ///
    /// With `confirming`, the committed offset is where a body of unknown length ended, and
    /// the request asks whether anything follows: a 416 with `*/offset`, a 206 that brings no
    /// new byte, or a 200 whose `Content-Length` is the offset confirms the end; a 206 with
    /// more continues the file; when the server cannot say (no ranges and no length), the
    /// file is finished unconfirmed and the result says so.
    private func firstResponse(given: HTTPTransport.Response?, confirming: Bool = false) async throws
        -> SegmentResponse?
    {
        var offset = segments[0].committed
        progress.update { $0.bytesReceived = offset }
        if given == nil, offset > 0, try await openPart().size() < offset {
            logger.warning("part file shorter than its checkpoint; starting over")
            try await resetToZero(validators: task.validators)
            offset = 0
        }
        var range: String?
        var ifRange: String?
        var overlap: Int64 = 0
        if given == nil, offset > 0 || confirming {
            ifRange = task.validators.ifRangeValue
            overlap = min(offset, Transfer.overlapLength)
            if overlap == offset, ifRange == nil, !confirming {
                // No validator and little done: fetching it again is cheaper than checking it.
                try await resetToZero(validators: task.validators)
                offset = 0
                overlap = 0
            } else {
                range = "bytes=\(offset - overlap)-"
            }
        }
        let requestStart = offset - overlap

        let response: HTTPTransport.Response
        if let given {
            response = given
        } else {
            response = try await environment.transport.get(
                url,
                headers: requestHeaders,
                range: range,
                ifRange: ifRange,
                logger: logger
            )
        }
        task.finalURL = response.url.absoluteString
        if confirming, response.status == 200, task.validators.contradiction(response.headers) == nil {
            let length = Self.contentLength(response.headers)
            if length == nil || length == offset {
                await HTTPTransport.discard(response.head.body)
                try await settleLength(offset, unconfirmed: length == offset ? nil : "the server ignores ranges")
                return nil
            }
        }
        switch response.status {
        case 200:
            if offset > 0 || given != nil {
                logger.notice("server sent the whole file (range ignored or file changed); writing it from byte 0")
            }
            let expectedEnd = try await beginFromZero(response)
            return SegmentResponse(
                response: response,
                segmentStart: 0,
                bodyOffset: 0,
                overlap: [],
                expectedEnd: expectedEnd
            )
        case 206 where range != nil:
            let contentRange = try SegmentWorker.checkPartial(
                response.headers,
                requestStart: requestStart,
                requestLast: nil,
                totalLength: task.totalLength,
                validators: task.validators
            )
            // A length never known is learnt from Content-Range, or confirmed by a 206 that
            // ends where the file did (its overlap is compared as it streams).
            if task.totalLength == nil,
                let total = contentRange.completeLength ?? (contentRange.range!.upperBound + 1 == offset ? offset : nil)
            {
                try await settleLength(total)
            }
            progress.update { $0.totalBytes = self.task.totalLength }
            let expected = overlap > 0 ? try await openPart().read(at: requestStart, count: Int(overlap)) : []
            return SegmentResponse(
                response: response,
                segmentStart: segments[0].start,
                bodyOffset: requestStart,
                overlap: expected,
                expectedEnd: contentRange.range!.upperBound + 1
            )
        case 416 where range != nil:
            await HTTPTransport.discard(response.head.body)
            if let change = task.validators.contradiction(response.headers) {
                throw Restart(reason: "416 from another version of the file: \(change)")
            }
            let contentRange = response.headers.first(name: "Content-Range").flatMap(ContentRange.init(parsing:))
            // Rule 6: complete only when every byte of the stored length is committed and the
            // server names exactly that length; a file that shrank or grew starts over.
            if contentRange?.range == nil, let current = contentRange?.completeLength, current == offset,
                task.totalLength == nil || task.totalLength == current
            {
                if task.totalLength == nil { try await settleLength(offset) }
                return nil
            }
            if confirming, contentRange == nil {
                try await settleLength(offset, unconfirmed: "its 416 names no length")
                return nil
            }
            let said = contentRange?.completeLength.map { "\($0) bytes" } ?? "no length"
            throw Restart(reason: "416 for bytes from \(requestStart) (the server says \(said), \(offset) were committed)")
        default:
            let failure = await HTTPTransport.failure(response, url: url)
            if confirming, !failure.isRetryable {
                try await settleLength(offset, unconfirmed: "it answered HTTP \(response.status)")
                return nil
            }
            throw failure
        }
    }

    /// Records the length of a file whose length was unknown: confirmed by the server, or,
    /// with `unconfirmed`, the reason it could not be.
    private func settleLength(_ length: Int64, unconfirmed why: String? = nil) async throws {
        if let why {
            lengthConfirmed = false
            logger.warning(
                "the end of the file could not be confirmed",
                metadata: ["bytes": "\(length)", "reason": "\(why)"]
            )
        }
        task.totalLength = length
        segments[0].end = length
        try await store.saveResponse(task, segments: segments)
        progress.update { $0.totalBytes = length }
    }

    static func contentLength(_ headers: HTTPHeaders) -> Int64? {
        guard headers.first(name: "Transfer-Encoding") == nil, let text = headers.first(name: "Content-Length"),
            let value = Int64(text.trimmingCharacters(in: .whitespaces)), value >= 0
        else { return nil }
        return value
    }

    /// Runs the connections over the plan with checkpoints beside them, then makes the last
    /// checkpoint, whether they finished, failed or were stopped.
    private func runConnections(plan: SegmentPlan, first: SegmentResponse?) async throws {
        let part = try await openPart()
        let worker = SegmentWorker(
            plan: plan,
            part: part,
            transport: environment.transport,
            url: url,
            headers: requestHeaders,
            ifRange: task.validators.ifRangeValue,
            validators: task.validators,
            totalLength: task.totalLength,
            limiters: [limiter, environment.globalLimiter],
            progress: progress,
            control: control,
            retry: environment.retry,
            flushInterval: min(environment.checkpointInterval / 2, .milliseconds(200)),
            logger: logger
        )
        let checkpointer = Checkpointer(
            part: part,
            store: store,
            taskID: task.id,
            plan: plan,
            interval: environment.checkpointInterval,
            bytes: environment.checkpointBytes
        )
        let extra = first == nil ? connections : (plan.count > 1 ? min(connections, plan.count) - 1 : 0)
        if plan.count > 1 {
            logger.debug("segmented", metadata: ["segments": "\(plan.count)", "connections": "\(connections)"])
        }
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await checkpointer.run() }
                group.addTask {
                    try await withThrowingDiscardingTaskGroup { workers in
                        if let first { workers.addTask { try await worker.run(first: first) } }
                        for _ in 0..<extra { workers.addTask { try await worker.run(first: nil) } }
                    }
                }
                // Whichever ends first: the connections (done, or failed), or the checkpointer,
                // which ends only by failing (the store refuses the checkpoint): then the
                // connections stop at once rather than fetch what can no longer be recorded.
                try await group.next()
                group.cancelAll()
                try await group.waitForAll()
            }
        } catch {
            try? await checkpointer.checkpoint()
            segments = plan.records(taskID: task.id)
            if control.requested != nil { throw CancellationError() }
            throw error
        }
        try await checkpointer.checkpoint()
        segments = plan.records(taskID: task.id)
        // A stream of unknown length ended: the caller confirms where the file ends.
        if plan.count == 1, plan.segment(0).end == nil { return }
        guard plan.isComplete else {
            throw HaulError(
                .connection,
                "The connections ended before the whole file arrived for \(task.url)",
                url: url
            )
        }
    }

    /// A 200: the whole representation from byte 0, on this very response (rule 5). Records
    /// its validators, length and the file name before a byte is written.
    private func beginFromZero(_ response: HTTPTransport.Response) async throws -> Int64? {
        let headers = response.headers
        let length = Self.contentLength(headers)
        if task.fileName == nil {
            let name = FileNaming.fileName(
                contentDisposition: headers.first(name: "Content-Disposition"),
                url: response.url
            )
            task.fileName = name
            progress.update { $0.fileName = name }
            try checkDestinationFree()
        }
        try await resetToZero(validators: Validators(headers: headers, totalLength: length))
        progress.update { $0.totalBytes = length }
        return length
    }

    // MARK: Checkpoints and part file

    /// Forgets all partial data: truncates the part file and records offset 0 and the new
    /// validators in one transaction, before any byte of the new representation is written.
    private func resetToZero(validators: Validators) async throws {
        task.validators = validators
        segments = [SegmentRecord(taskID: task.id, ordinal: 0, start: 0, end: validators.totalLength, committed: 0)]
        if part != nil || task.partPath.map(FileOps.exists) == true { try await openPart().truncate(to: 0) }
        try await store.saveResponse(task, segments: segments)
        progress.update {
            $0.bytesReceived = 0
            $0.bytesThisRun = 0
            $0.resumedFrom = nil
        }
    }

    /// The task's part file, opened and locked: the one it created, when that is still
    /// there and still its own; else a new one. A file that is not this task's — another
    /// download's part file, a file Haul did not create, a hard link, a symbolic link — is
    /// never written into: the download starts over in a part file of its own.
    private func openPart() async throws -> PartFile {
        if let part { return part }
        guard let destination = task.destinationPath else {
            throw HaulError(.invalidResponse, "No file name chosen before writing", url: url)
        }
        if let path = task.partPath {
            do {
                let file = try PartFile.openOwned(at: path, owner: task.id, identity: task.partIdentity)
                part = file
                return file
            } catch PartFile.Claim.missing {
                if committedBytes > 0 { logger.warning("the part file is gone; starting over", metadata: ["path": "\(path)"]) }
            } catch let PartFile.Claim.foreign(reason) {
                logger.warning(
                    "leaving alone a file that is not this download's part file; starting over in a new one",
                    metadata: ["path": "\(path)", "reason": "\(reason)"]
                )
            }
        }
        let file = try await createPart(beside: destination)
        part = file
        task.partPath = file.path
        task.partIdentity = file.identity
        try await store.setPart(task.id, path: file.path, identity: file.identity)
        // The bytes the store counted are not in this new file.
        if committedBytes > 0 { try await resetToZero(validators: task.validators) }
        return file
    }

    /// Creates a part file beside the destination: `NAME.part`, or `NAME.<id>.part` when a
    /// file (or another task's record) already has that name.
    private func createPart(beside destination: String) async throws -> PartFile {
        let id = task.id.uuidString.lowercased()
        for candidate in [destination + ".part", destination + ".\(id.prefix(8)).part", destination + ".\(id).part"] {
            if try await store.isPartPathTaken(candidate, byOtherThan: task.id) { continue }
            do {
                return try PartFile.create(at: candidate, owner: task.id)
            } catch PartFile.Claim.exists {
                // This task's own, from a run that stopped before recording it: adopt it.
                do {
                    let mine = try PartFile.openOwned(at: candidate, owner: task.id, identity: nil)
                    try mine.truncate(to: 0)
                    return mine
                } catch is PartFile.Claim {
                    continue
                }
            }
        }
        throw HaulError(
            .fileSystem,
            "Every part file name beside \(destination) is taken by other files",
            path: destination,
            hint: "Remove the stale \((destination as NSString).lastPathComponent).*.part files or choose another name with -o"
        )
    }

    /// Forgets the part file once it is gone (moved into place or deleted).
    private func forgetPart() async throws {
        task.partPath = nil
        task.partIdentity = nil
        let (store, id) = (store, task.id)
        try await uncancellable { try await store.setPart(id, path: nil, identity: nil) }
    }

    // MARK: Ending

    /// Verifies and moves the part file into place.
    private func finish(started: ContinuousClock.Instant) async throws -> DownloadResult {
        let part = try await openPart()
        let total = task.totalLength ?? committedBytes
        guard let destination = task.destinationPath, let partPath = task.partPath else {
            throw HaulError(.invalidResponse, "No file name chosen", url: url)
        }
        // Blocking file work (truncate, fsync, reading the whole file for a digest, rename and
        // the directory's fsync) runs on NIO's thread pool, never on Swift's cooperative threads.
        try await FileIO.run {
            if try part.size() != total { try part.truncate(to: total) }
            try part.sync()
        }
        if let checksum {
            let algorithm = checksum.algorithm
            let actual = try await FileIO.run { try part.digest(algorithm, length: total) }
            guard actual == checksum.hex else {
                // The bytes are wrong; keeping them would only make a rerun verify them again.
                FileOps.remove(partPath)
                part.close()
                self.part = nil
                try await forgetPart()
                try await resetToZero(validators: Validators())
                var error = HaulError(
                    .checksumMismatch,
                    "Checksum mismatch for \(destination): expected \(checksum.algorithm.name) \(checksum.hex), got \(actual)",
                    url: url,
                    path: destination,
                    hint: "Nothing was saved; check the checksum or the URL"
                )
                error.underlying = nil
                throw error
            }
        }
        try checkDestinationFree()
        let replacing = task.overwrite
        try await FileIO.run { try FileOps.rename(partPath, to: destination, replacing: replacing) }
        part.unmark()  // The finished file is the user's, not a part file.
        part.close()
        self.part = nil
        try await forgetPart()
        // A crash right here leaves the file in place and the task not yet completed; the
        // next run recognises it (see alreadyComplete) instead of calling it a stranger's file.
        try await record(.completed)
        let fetched = progress.snapshot().bytesThisRun
        logger.info("completed", metadata: ["path": "\(destination)", "bytes": "\(total)"])
        return DownloadResult(
            taskID: task.id,
            path: destination,
            bytes: total,
            bytesFetched: fetched,
            resumedFrom: progress.snapshot().resumedFrom,
            alreadyComplete: false,
            elapsed: ContinuousClock.now - started,
            lengthConfirmed: lengthConfirmed
        )
    }

    /// Records how the run ended and turns any error into the ``HaulError`` to report.
    private func conclude(after error: any Error) async -> HaulError {
        if part == nil, let error = error as? HaulError, error.code == .busy {
            return error  // Another process owns this download and its records.
        }
        let stop = control.requested
        part?.close()
        part = nil
        let resumeData = makeResumeData()
        do {
            switch stop {
            case .pause, .yield:
                try await record(stop == .pause ? .paused : .queued)
                var paused = HaulError(.paused, "Paused \(task.url) at \(committedBytes) bytes", url: url)
                paused.resumeData = resumeData
                return paused
            case .cancel:
                if let partPath = task.partPath {
                    PartFile.remove(at: partPath, owner: task.id, identity: task.partIdentity)
                    try await forgetPart()
                }
                try await record(.cancelled)
                return HaulError(.cancelled, "Cancelled \(task.url)", url: url)
            case nil:
                var failure =
                    error as? HaulError
                    ?? HaulError(.connection, "Download of \(task.url) failed", url: url, underlying: error)
                if failure.path == nil { failure.path = task.destinationPath }
                if failure.code != .checksumMismatch, committedBytes > 0 { failure.resumeData = resumeData }
                let message = failure.description
                try await record(.failed, error: message)
                return failure
            }
        } catch {
            return error as? HaulError
                ?? HaulError(.store, "Recording the end of \(task.url) failed", underlying: error)
        }
    }

    /// Records a state in the store and in the task this transfer holds, so a later save of
    /// the task (validators, segments) never writes back a stale state.
    private func record(_ state: TaskState, error: String? = nil) async throws {
        let (store, id) = (store, task.id)
        try await uncancellable { try await store.setState(id, state.rawValue, error: error) }
        task.state = state.rawValue
        task.errorMessage = error
    }

    func makeResumeData() -> ResumeData {
        ResumeData(record: task, segments: segments)
    }
}

/// Runs `body` to the end even when the calling task is cancelled: the bookkeeping after a
/// pause (the last checkpoint, the state) must still reach the store.
func uncancellable<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await Task { try await body() }.value
}
