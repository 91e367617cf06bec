import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix

/// One download, from the first request to the verified file in place: the I/O driver of
/// ``TransferRules``. A run is a few jobs, each its own type: its store writes
/// (``RunRecorder``), its part file, every system call of which runs off the cooperative pool
/// (``RunPart``), which of the URL and its mirrors opens each attempt (``SourceSelector``),
/// and a pure planner of what to do after each attempt (``NextStep``). The transfer sends the
/// requests the rules choose, runs the connections with checkpoints beside them
/// (``ConnectionRun``), and performs each step. Its attempts are in Transfer+Attempt.swift,
/// its end (verification, the atomic rename, the recorded state) in Transfer+Completion.swift.
/// The rules are numbered in docs/architecture.md.
final class Transfer {
    let recorder: RunRecorder
    let partFile: RunPart
    let environment: TransferEnvironment
    let progress: ProgressBox
    let control: TransferControl
    let limiter: RateLimiter
    let logger: Logger
    /// The environment's transport with this task's TLS configuration, once loaded.
    var transport: HTTPTransport
    /// False when the server never gave the length and its end could not be confirmed.
    var lengthConfirmed = true
    /// Whether the file at the destination may be replaced (``run()`` decides).
    var mayReplaceDestination = false
    /// Set once the server answered a range request with the same file whole: it will not
    /// serve ranges (to this client, with this `If-Range`), so this run stops splitting.
    var rangesDeclined = false
    /// Which of the URL and its mirrors opens each attempt, when it has mirrors.
    let selector: SourceSelector?
    /// The task's piece hashes, once read, when it has some (RunPieces.swift).
    var pieces: RunPieces?
    /// The `Content-Type` of this run's opening answer (none when it resumed its segments).
    var contentType: String?
    /// A digest of the whole file the lead server sent (``ServerDigest``), checked at the end
    /// when no checksum was given.
    var serverDigest: ServerDigest?
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
        recorder = RunRecorder(task: task, segments: segments, store: environment.store)
        self.environment = environment
        self.progress = progress
        self.control = control
        self.limiter = limiter
        self.transport = environment.transport
        var logger = environment.logger
        logger[metadataKey: "haul.task"] = "\(task.id)"
        self.logger = logger
        partFile = RunPart(recorder: recorder, logger: logger)
        selector = SourceSelector(task, logger: logger)
    }

    /// The task as this run holds it (``RunRecorder``).
    var task: TaskRecord { recorder.task }
    var segments: [SegmentRecord] { recorder.segments }
    var url: URL { task.url }
    /// The URL and its mirrors while the download runs, when it has mirrors.
    var sources: SourcePool? { selector?.pool }
    /// Where an attempt's first request goes: the lead's URL.
    var openingURL: URL { selector?.openingURL ?? task.url }
    var checksum: Checksum? { task.checksum }
    /// The range rules over the version of the file the store holds.
    var rules: TransferRules { TransferRules(task.validators) }
    /// Bytes durably on disk in all segments.
    var committedBytes: Int64 { recorder.committedBytes }

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
                let check = NewerCheck(
                    recorder: recorder,
                    transport: transport,
                    environment: environment,
                    progress: progress,
                    logger: logger
                )
                switch try await check.ask(completed: done) {
                case .upToDate(let result): return result
                case .newer(let response): newer = response
                case .noFile: break
                }
            }
            // --continue: a file Haul did not download, confirmed as this one's beginning.
            if task.continuesExisting, newer == nil, committedBytes == 0 {
                try await ContinueCheck(
                    recorder: recorder,
                    part: partFile,
                    transport: transport,
                    environment: environment,
                    progress: progress,
                    logger: logger
                ).run()
            }
            // What may be replaced: with -N, the file the server has a newer version of, or
            // the one a newer version already under way (resumed) was compared with.
            mayReplaceDestination = task.overwrite || newer != nil || (task.checkNewer && committedBytes > 0)
            try checkDestinationFree()
            // Take the part file's lock before touching the task's records, so a second
            // process asked for the same download stops here and changes nothing. A new
            // download has none yet: its first answer makes NAME.part and claims it with the
            // answer's record (one write, not two, and the request waits for neither), and
            // takes the lock before it records anything when the name is taken (resetToZero).
            let startsNew = task.partPath == nil && committedBytes == 0 && newer == nil && !task.continuesExisting
            if task.destinationPath != nil, !startsNew { _ = try await openPart() }
            // Read with the task for this run, or now.
            let store = environment.store
            let stored = if let known = task.storedPieces { known } else { try await store.pieces(of: task.id) }
            pieces = stored.map { RunPieces($0, taskID: task.id, url: url, store: store) }
            if newer != nil { try await resetToZero(validators: Validators()) }
            if committedBytes == 0, task.totalLength == nil, newer == nil, !task.checkNewer, !task.continuesExisting {
                // A new download's first write is its response (beginFromZero): "running" is
                // recorded with it, one transaction instead of two. Until then the store says
                // queued, which a crash or a failure before any answer leaves just as well.
                recorder.deferRunning()
            } else {
                try await recorder.record(.running)
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

    /// Runs attempts until one is done, performing the step the planner (``NextStep``) says
    /// after each: a restart from 0 (a bounded number of times), a retry after a backoff (a
    /// bounded number in a row without progress), the next source, or the end.
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
            let facts = NextStep.Facts(
                url: url,
                committed: committedBytes,
                verifiedSources: sources?.verifiedCount ?? 0,
                offline: { [environment, url] in environment.isOffline(url) },
                rules: rules
            )
            let (selector, maxRetries) = (selector, environment.retry.maxRetries)
            given = nil
            switch NextStep.after(
                outcome,
                facts: facts,
                budget: &budget,
                policy: environment.retry,
                leadGivesWay: { selector?.dropLead(after: $0, retryable: $1, maxRetries: maxRetries) ?? false },
                changedLeadGivesWay: { selector?.dropChangedLead(reason: $0) ?? false }
            ) {
            case .finish: return
            case .stop: throw CancellationError()
            case .giveUp(let error): throw error
            case .nextSource: continue
            case let .startOver(restart, declined):
                if declined {
                    logger.notice(
                        "the server ignored the range; writing its whole response from byte 0 on one connection"
                    )
                    rangesDeclined = true
                } else {
                    logger.notice("restarting from 0", metadata: ["reason": "\(Redaction.text(restart.reason))"])
                }
                try await resetToZero(validators: Validators())
                given = restart.response
            case let .retry(error, delay, attempt):
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
    }

    /// Follows a change of lead before an attempt (``SourceSelector/followLead()``): a
    /// verified new lead's validators become the file's; an unverified one starts it over.
    private func followLead() async throws {
        switch selector?.followLead() {
        case .verified(var validators)?:
            validators.totalLength = task.totalLength
            recorder.update { [sources = selector?.pool.snapshot] in
                $0.validators = validators
                $0.sources = sources ?? $0.sources
            }
            try await recorder.saveResponse()
        case .unverified?:
            try await resetToZero(validators: Validators())
        case nil:
            break
        }
    }

    /// Forgets all partial data: empties the part file and records offset 0 and the new
    /// validators in one transaction, before any byte of the new representation is written.
    /// - Parameter creatingPart: a download's first response: its part file, when it has
    ///   none, is made now and claimed in that transaction (one write, not two).
    func resetToZero(validators: Validators, creatingPart: Bool = false) async throws {
        // Mirrors are compared again with the bytes of the file that starts now.
        sources?.forgetVerification()
        // Pieces verified in the old file say nothing of the new one's.
        try await pieces?.forgetVerified()
        try await partFile.truncate()
        let made = creatingPart ? await partFile.makeFirst() : nil
        // NAME.part taken (another process's run of this download, another task's file): the
        // part file is opened or made under another name, locked, before the record changes.
        if creatingPart, made == nil, partFile.file == nil, task.destinationPath != nil {
            _ = try await partFile.open()
        }
        let claimed: Bool
        do {
            claimed = try await recorder.startFromZero(
                validators: validators,
                sources: sources?.snapshot,
                claiming: made
            )
        } catch {
            if let made { await partFile.discard(made) }
            throw error
        }
        if let made {
            // Another task's record names it: not this one's to use.
            if claimed { partFile.keep(made) } else { await partFile.discard(made) }
        }
        progress.update {
            $0.bytesReceived = 0
            $0.bytesThisRun = 0
            $0.resumedFrom = nil
        }
    }

    /// The task's part file, opened and locked (``RunPart/open()``); a new one where the
    /// store counted bytes starts the download over.
    func openPart() async throws -> PartFile {
        let (file, new) = try await partFile.open()
        if new, committedBytes > 0 { try await resetToZero(validators: task.validators) }
        return file
    }
}
