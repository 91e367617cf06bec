import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// One download, from the first request to the verified file in place: the I/O driver of
/// ``TransferRules``.
///
/// It owns the part file and the task's records while it runs; nothing else touches them.
/// The rules decide which request opens each attempt and what each answer means; the
/// transfer sends the requests, runs the connections (``SegmentWorker``) with checkpoints
/// beside them (``Checkpointer``: `fdatasync`, then the committed offsets in the store),
/// and acts on how each attempt ended (``AttemptOutcome``). Its part file lives in
/// Transfer+PartFile.swift, its end (verification, the atomic rename, the recorded state)
/// in Transfer+Completion.swift. The rules are numbered in docs/architecture.md.
final class Transfer {
    var task: TaskRecord
    var segments: [SegmentRecord]
    let environment: TransferEnvironment
    let progress: ProgressBox
    let control: TransferControl
    private let limiter: RateLimiter
    var logger: Logger
    var part: PartFile?
    /// The environment's transport with this task's TLS configuration, once loaded.
    var transport: HTTPTransport
    /// False when the server never gave the length and its end could not be confirmed.
    var lengthConfirmed = true
    /// Whether the file at the destination may be replaced (``run()`` decides).
    var mayReplaceDestination = false
    /// Set once the server answered a range request with the same file whole: it will not
    /// serve ranges (to this client, with this `If-Range`), so this run stops splitting.
    private var rangesDeclined = false
    /// Which of the URL and its mirrors opens each attempt, when it has mirrors.
    let selector: SourceSelector?
    /// The task's piece hashes, once read, when it has some (RunPieces.swift).
    var pieces: RunPieces?
    /// The `Content-Type` of this run's opening answer (none when it resumed its segments).
    var contentType: String?
    /// A digest of the whole file the lead server sent (``ServerDigest``), checked at the end
    /// when no checksum was given.
    var serverDigest: ServerDigest?
    /// Set while the run's "running" is to be recorded with its first response (a new download).
    var runningUnrecorded = false
    /// The last checkpoint of connections that wrote the whole file, made with the sync that
    /// completes it (``finish(started:)``) rather than with a sync of its own.
    var lastCheckpoint: Checkpointer?

    /// Restarts from zero allowed (a changed or inconsistent representation) before giving up.
    static let maxRestarts = 3

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
        self.transport = environment.transport
        var logger = environment.logger
        logger[metadataKey: "haul.task"] = "\(task.id)"
        self.logger = logger
        selector = SourceSelector(task, logger: logger)
    }

    var url: URL { task.url }
    /// The URL and its mirrors while the download runs, when it has mirrors.
    var sources: SourcePool? { selector?.pool }
    /// Where an attempt's first request goes: the lead's URL.
    var openingURL: URL { selector?.openingURL ?? task.url }
    private var requestHeaders: [HTTPHeaderField] { task.requestHeaders }
    var checksum: Checksum? { task.checksum }
    var store: any TaskStore { environment.store }
    /// The range rules over the version of the file the store holds.
    private var rules: TransferRules { TransferRules(task.validators) }
    /// Bytes durably on disk in all segments.
    var committedBytes: Int64 { segments.reduce(0) { $0 + ($1.committed - $1.start) } }
    /// Connections for this download.
    private var connections: Int {
        if rangesDeclined { return 1 }
        if let selector { return selector.connections(wanted: task.connections, otherwise: environment.connections) }
        return max(1, min(task.connections ?? environment.connections, environment.connectionCap))
    }
    private var minSplitSize: Int64 { max(64 * 1024, task.minSplitSize ?? environment.minSplitSize) }

    // MARK: Running

    /// Runs the download to the end: the verified file in place, or an error.
    func run() async throws -> DownloadResult {
        let started = environment.timeline.now
        do {
            let done = try await alreadyComplete()
            if let done, !task.checkNewer { return done }
            // The files TLS options name are read at each start: a daemon sees them as they are now.
            try await prepareTransport()
            // -N: a file at the destination is compared with the server's; a newer version
            // arrives as this response, written from byte 0 and put in the file's place.
            var newer: HTTPTransport.Response?
            if task.checkNewer, done != nil || committedBytes == 0 {
                switch try await askForNewer(completed: done) {
                case .upToDate(let result): return result
                case .newer(let response): newer = response
                case .noFile: break
                }
            }
            // --continue: a file Haul did not download, confirmed as this one's beginning.
            if task.continuesExisting, newer == nil, committedBytes == 0 {
                try await continueExistingFile()
            }
            // What may be replaced: with -N, the file the server has a newer version of, or
            // the one a newer version already under way (resumed) was compared with.
            mayReplaceDestination = task.overwrite || newer != nil || (task.checkNewer && committedBytes > 0)
            try checkDestinationFree()
            // Take the part file's lock before touching the task's records, so a second
            // process asked for the same download stops here and changes nothing.
            if task.destinationPath != nil { _ = try await openPart() }
            // Read with the task for this run, or now.
            let stored = if let known = task.storedPieces { known } else { try await store.pieces(of: task.id) }
            pieces = stored.map { RunPieces($0, taskID: task.id, url: url, store: store) }
            if newer != nil { try await resetToZero(validators: Validators()) }
            if committedBytes == 0, task.totalLength == nil, newer == nil, !task.checkNewer, !task.continuesExisting {
                // A new download's first write is its response (beginFromZero): "running" is
                // recorded with it, one transaction instead of two. Until then the store says
                // queued, which a crash or a failure before any answer leaves just as well.
                runningUnrecorded = true
            } else {
                try await record(.running)
            }
            progress.update {
                $0.fileName = task.fileName
                $0.totalBytes = task.totalLength
                $0.bytesReceived = committedBytes
                $0.resumedFrom = committedBytes > 0 ? committedBytes : nil
            }
            try await transferWithRetries(given: newer)
            let result = try await finish(started: started)
            await saveCookies()
            return result
        } catch {
            await saveCookies()
            throw await conclude(after: error)
        }
    }

    /// The transport for this task: its TLS configuration, proxies, credentials and cookies,
    /// the files they name read at each start.
    func prepareTransport() async throws {
        transport = try await environment.transport.configured(
            tls: task.tls,
            proxy: task.proxy,
            credentials: task.credentials,
            cookies: task.cookies,
            url: task.url
        )
    }

    private func saveCookies() async {
        await transport.saveCookies(to: task.cookies.save, logger: logger)
    }

    /// Runs attempts until one is done, acting on how each ended: a restart from 0 (a
    /// bounded number of times), a retry after a backoff (a bounded number in a row
    /// without progress), or the end.
    /// - Parameter given: a 200 already received, written first (from byte 0).
    private func transferWithRetries(given first: HTTPTransport.Response?) async throws {
        var budget = RetryBudget(
            maxRetries: environment.retry.maxRetries,
            maxRestarts: Transfer.maxRestarts,
            committed: committedBytes
        )
        var given = first
        while true {
            let outcome: AttemptOutcome
            do {
                try await followLead()
                try await attempt(given: given)
                outcome = .done
            } catch {
                outcome = AttemptOutcome(error, stopRequested: control.requested != nil)
            }
            switch outcome {
            case .done, .stepAside:
                return
            case .stopped:
                throw CancellationError()
            case let .failed(error):
                // A lead that cannot serve the file gives way to the next source.
                guard dropLead(after: error, retryable: false) else { throw error }
                given = nil
            case let .restart(restart)
            where restart.response == nil && !restart.keepsLead && committedBytes > 0
                && (sources?.verifiedCount ?? 0) > 1:
                // The lead's copy changed, and verified mirrors hold the bytes written: they
                // continue the file.
                guard selector?.dropChangedLead(reason: restart.reason) == true else { throw restart }
                given = nil
            case let .restart(restart):
                given = restart.response
                try await startOver(after: restart, budget: &budget)
            case let .retry(error):
                given = nil
                try await retry(after: error, budget: &budget)
            }
        }
    }

    /// Follows a change of lead before an attempt (``SourceSelector/followLead()``): a
    /// verified new lead's validators become the file's; an unverified one starts it over.
    private func followLead() async throws {
        switch selector?.followLead() {
        case .verified(var validators)?:
            validators.totalLength = task.totalLength
            task.validators = validators
            task.sources = selector?.pool.snapshot ?? task.sources
            try await store.saveResponse(task, segments: segments)
        case .unverified?:
            try await resetToZero(validators: Validators())
        case nil:
            break
        }
    }

    /// Whether the lead's failure gives its place to the next source (``SourceSelector/dropLead(after:retryable:maxRetries:)``).
    private func dropLead(after error: any Error, retryable: Bool) -> Bool {
        selector?.dropLead(after: error, retryable: retryable, maxRetries: environment.retry.maxRetries) ?? false
    }

    /// Starts the file over from byte 0: with the whole response the server sent instead of
    /// a range (rule 5 without a change: a retry, not a new version), or because its file
    /// changed (a restart, a bounded number of times).
    private func startOver(after restart: Restart, budget: inout RetryBudget) async throws {
        let whole = restart.response.map { rules.isSameFile(status: $0.status, headers: $0.headers) } ?? false
        switch StartOverDecision.after(
            restart,
            wholeSameFile: whole,
            committed: committedBytes,
            budget: &budget,
            url: url
        ) {
        case .giveUp(let error):
            throw error
        case .writeWhole:
            logger.notice("the server ignored the range; writing its whole response from byte 0 on one connection")
            rangesDeclined = true
        case .restart:
            logger.notice("restarting from 0", metadata: ["reason": "\(Redaction.text(restart.reason))"])
        }
        try await resetToZero(validators: Validators())
    }

    /// Tries again after `error`, which may pass: at once on the next source when the lead
    /// gave way, else after a backoff, while retries in a row without progress remain.
    private func retry(after error: HaulError, budget: inout RetryBudget) async throws {
        if environment.isOffline(url) { throw error }  // The manager waits for the network.
        if dropLead(after: error, retryable: true) { return }
        switch RetryDecision.transfer(
            after: error,
            committed: committedBytes,
            budget: &budget,
            policy: environment.retry
        ) {
        case .giveUp(let failure):
            throw failure
        case .retry(let delay, let attempt):
            HaulMetrics.retry(error.code)
            try await environment.retry.wait(
                delay,
                attempt: attempt,
                after: error,
                progress: progress,
                logger: logger,
                timeline: environment.timeline
            )
        }
    }

    // MARK: One attempt

    /// One pass over the download: the opening the rules choose, then the connections. A
    /// download already split into several segments goes straight to its connections,
    /// each asking for its own range; a 200 a restart brought is written from byte 0.
    private func attempt(given: HTTPTransport.Response?) async throws {
        var confirming = false
        while true {
            let first: SegmentResponse?
            if let given, !confirming {
                first = try await answer(given, to: .whole, confirming: false, restarted: true)
            } else {
                // Only bytes already written need the part file; a first request may not even
                // know the file's name yet.
                let partSize = committedBytes > 0 ? try await openPart().size() : 0
                var opening = rules.opening(
                    segments: segments,
                    partSize: partSize,
                    confirming: confirming,
                    piecesChecked: try pieces?.verifier(forLength: task.totalLength) != nil
                )
                if case let .startOver(reason) = opening {
                    if let reason { logger.warning("\(reason); starting over") }
                    try await resetToZero(validators: task.validators)
                    opening = .whole
                }
                if opening == .segments {
                    let plan = SegmentPlan(segments, minSplit: minSplitSize)
                    plan.spread(over: connections)
                    try await runConnections(plan: plan, first: nil)
                    return
                }
                progress.update { [offset = segments[0].committed] in $0.bytesReceived = offset }
                let response = try await transport.get(
                    openingURL,
                    headers: requestHeaders,
                    range: opening.range,
                    ifRange: opening.ifRange,
                    logger: logger
                )
                first = try await answer(response, to: opening, confirming: confirming, restarted: false)
            }
            guard let first else { return }
            let plan = SegmentPlan(segments, minSplit: minSplitSize)
            plan.own(0)
            if connections > 1, rules.maySplit(status: first.response.status, headers: first.response.headers) {
                plan.split(0, into: connections)
            }
            try await runConnections(plan: plan, first: first)
            // A body of unknown length ended with its connection: a clean close looks the same
            // as a cut one, so ask the server whether anything follows (rule 8).
            guard task.totalLength == nil else { return }
            confirming = true
        }
    }

    /// Acts on the rules' reading of an attempt's first answer. Returns the response to
    /// stream, or nil when nothing is left to fetch.
    private func answer(
        _ response: HTTPTransport.Response,
        to opening: TransferRules.Opening,
        confirming: Bool,
        restarted: Bool
    ) async throws -> SegmentResponse? {
        task.finalURL = response.url
        contentType = response.headers.first(name: "Content-Type")
        let digest = ServerDigest(headers: response.headers, status: response.status)
        switch rules.classify(status: response.status, headers: response.headers, to: opening, confirming: confirming) {
        case let .wholeFile(length):
            serverDigest = digest  // The file from byte 0: its digest, or none.
            if opening != .whole || restarted {
                logger.notice("server sent the whole file (range ignored or file changed); writing it from byte 0")
            }
            try await beginFromZero(response, length: length)
            return SegmentResponse(response: response, segmentStart: 0, bodyOffset: 0, overlap: [], expectedEnd: length)
        case let .continues(end, learntLength):
            if let digest { serverDigest = digest }
            if let learntLength { try await settleLength(learntLength) }
            progress.update { $0.totalBytes = self.task.totalLength }
            let (start, overlap) = opening.bodyStart
            let expected = overlap > 0 ? try await openPart().read(at: start, count: Int(overlap)) : []
            return SegmentResponse(
                response: response,
                segmentStart: segments[0].start,
                bodyOffset: start,
                overlap: expected,
                expectedEnd: end
            )
        case let .complete(length, unconfirmed):
            await HTTPTransport.discard(response.head.body)
            if task.totalLength == nil { try await settleLength(length, unconfirmed: unconfirmed) }
            return nil
        case let .restart(reason):
            if response.status == 416 { await HTTPTransport.discard(response.head.body) }
            throw Restart(reason: reason)
        case .failure:
            throw await HTTPTransport.failure(response, url: openingURL)
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

    /// A 200: the whole representation from byte 0, on this very response (rule 5). Records
    /// its validators, length and the file name before a byte is written.
    private func beginFromZero(_ response: HTTPTransport.Response, length: Int64?) async throws {
        let headers = response.headers
        if task.fileName == nil {
            let name = FileNaming.fileName(
                contentDisposition: headers.first(name: "Content-Disposition"),
                url: response.url
            )
            task.fileName = name
            progress.update { $0.fileName = name }
            try checkDestinationFree()
        }
        try await resetToZero(validators: Validators(headers: headers, totalLength: length), creatingPart: true)
        progress.update { $0.totalBytes = length }
    }

    // MARK: Connections

    /// Runs the connections over the plan with checkpoints beside them, then makes the last
    /// checkpoint, whether they finished, failed or were stopped.
    func makeWorker(plan: SegmentPlan, part: PartFile, share: HostConnections.Share? = nil) -> SegmentWorker {
        SegmentWorker(
            plan: plan,
            part: part,
            transport: transport,
            url: url,
            headers: requestHeaders,
            rules: rules,
            limiters: [limiter, environment.globalLimiter],
            progress: progress,
            control: control,
            retry: environment.retry,
            flushInterval: min(environment.checkpointInterval / 2, .milliseconds(200)),
            logger: logger,
            isOffline: environment.isOffline,
            sources: sources,
            lead: selector?.leadIndex ?? 0,
            pieces: pieces?.verifier,
            lowestSpeed: environment.lowestSpeed,
            crossChecksMirrors: checksum == nil && serverDigest == nil && pieces?.verifier == nil,
            share: share,
            timeline: environment.timeline
        )
    }

    private func runConnections(plan: SegmentPlan, first: SegmentResponse?) async throws {
        let part = try await openPart()
        let pieces = try self.pieces?.prepare(plan: plan, total: task.totalLength)
        // Its host's connections are shared with the manager's other downloads there (mirrors:
        // each source has its own cap).
        let share = sources == nil ? environment.hostConnections?.share(host: DownloadManager.hostKey(url)) : nil
        let worker = makeWorker(plan: plan, part: part, share: share)
        let checkpointer = Checkpointer(
            part: part,
            store: store,
            taskID: task.id,
            plan: plan,
            interval: environment.checkpointInterval,
            bytes: environment.checkpointBytes,
            sources: sources,
            pieces: pieces,
            timeline: environment.timeline
        )
        let extra = first == nil ? connections : (plan.count > 1 ? min(connections, plan.count) - 1 : 0)
        if plan.count > 1 {
            logger.debug("segmented", metadata: ["segments": "\(plan.count)", "connections": "\(connections)"])
        }
        // The first response holds a connection of the lead before the others choose theirs:
        // otherwise one could take the lead's last free connection, and a mirror none.
        if let selector, first != nil { selector.pool.take(selector.leadIndex) }
        do {
            try await ConnectionRun(worker: worker, checkpointer: checkpointer, pieces: pieces, share: share)
                .run(first: first, extra: extra)
        } catch {
            segments = plan.records(taskID: task.id)
            if let sources { task.sources = sources.snapshot }
            throw error
        }
        // A stream of unknown length ended: the caller confirms where the file ends, from
        // what this checkpoint commits.
        let unknownEnd = plan.count == 1 && plan.segment(0).end == nil
        if plan.isComplete, !unknownEnd {
            // The whole file is written: completing it syncs it, and records this checkpoint
            // after that sync (one fdatasync per file, not two).
            lastCheckpoint = checkpointer
        } else {
            try await checkpointer.checkpoint()
        }
        segments = plan.records(taskID: task.id)
        if let sources { task.sources = sources.snapshot }
        if unknownEnd { return }
        guard plan.isComplete else {
            throw HaulError(
                .connection,
                "The connections ended before the whole file arrived for \(task.url)",
                url: url
            )
        }
    }
}
