import AsyncHTTPClient
import Foundation
import NIOCore
import NIOHTTP1

/// A transfer's attempts: the opening request the rules choose and what its answer means
/// (the whole file from byte 0, a continuation, nothing left, another version, a failure),
/// then the connections over the plan with checkpoints beside them.
extension Transfer {
    /// Connections for this download.
    private var connections: Int {
        if rangesDeclined { return 1 }
        if let selector { return selector.connections(wanted: task.connections, otherwise: environment.connections) }
        return max(1, min(task.connections ?? environment.connections, environment.connectionCap))
    }
    private var minSplitSize: Int64 { max(64 * 1024, task.minSplitSize ?? environment.minSplitSize) }

    // MARK: One attempt

    /// One pass over the download: the opening the rules choose, then the connections. A
    /// download already split into several segments goes straight to its connections,
    /// each asking for its own range; a 200 a restart brought is written from byte 0.
    func attempt(given: HTTPTransport.Response?) async throws {
        var confirming = false
        while true {
            let first: SegmentResponse?
            if let given, !confirming {
                first = try await answer(given, to: .whole, confirming: false, restarted: true)
            } else {
                // Only bytes already written need the part file; a first request may not even
                // know the file's name yet.
                var partSize: Int64 = 0
                if committedBytes > 0 {
                    _ = try await openPart()
                    partSize = try await partFile.size()
                }
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
                // A new download's part file is made while its request goes out.
                if opening == .whole, committedBytes == 0 { partFile.makeAhead() }
                let response = try await transport.get(
                    openingURL,
                    headers: task.requestHeaders,
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
        recorder.update { $0.finalURL = response.url }
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
            var expected: [UInt8] = []
            if overlap > 0 {
                _ = try await openPart()
                expected = try await partFile.read(at: start, count: Int(overlap))
            }
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
        try await recorder.settleLength(length)
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
            recorder.update { $0.fileName = name }
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
            headers: task.requestHeaders,
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
            timeline: environment.timeline,
            writePlacement: environment.writePlacement
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
            store: environment.store,
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
            keep(plan)
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
        keep(plan)
        if unknownEnd { return }
        guard plan.isComplete else {
            throw HaulError(
                .connection,
                "The connections ended before the whole file arrived for \(task.url)",
                url: url
            )
        }
    }

    /// Keeps what the connections' checkpointer recorded: the segments and the sources' standing.
    private func keep(_ plan: SegmentPlan) {
        recorder.adoptSegments(plan.records(taskID: task.id))
        if let sources { recorder.update { $0.sources = sources.snapshot } }
    }
}
