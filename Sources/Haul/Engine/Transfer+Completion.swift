import Foundation

/// How a transfer ends: a file already complete recognised without a request, the verified
/// part file moved into place (size, `fdatasync`, checksum, rename, the directory's sync),
/// or the end recorded — paused, queued again, cancelled or failed — with the error to report.
extension Transfer {
    /// The extended attribute that records a finished file's URL (freedesktop.org's
    /// "Common Extended Attributes").
    static let originAttribute = "user.xdg.origin.url"

    /// A task completed earlier whose file is still in place completes again without a request.
    /// So does one that crashed between moving its verified file into place and recording
    /// that: every byte was committed, the part file is gone, and a file of exactly that
    /// length is at the destination.
    func alreadyComplete() async throws -> DownloadResult? {
        guard !task.overwrite, let destination = task.destinationPath, let size = FileOps.size(destination) else {
            return nil
        }
        let recorded = task.state == .completed && size == task.totalLength ?? size
        // Moved into place by a run that stopped before recording it: the part file is gone,
        // and the file there is it — every byte committed, or the very file (its inode, kept
        // by the rename) whose last checkpoint was to be recorded with completion.
        let renamedBeforeCrash =
            task.totalLength == size && !FileOps.exists(task.partPath ?? destination + ".part")
            && (committedBytes == size
                || (task.partIdentity.map { recorded in
                    FileIdentity.at(destination).map { FileIdentity.same(recorded, $0) } ?? false
                } ?? false))
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
        // With -N the server is asked first: until it answers, nothing is known to be done
        // (askForNewer records it).
        if !task.checkNewer {
            if !recorded { try await recorder.record(.completed) }
            progress.update {
                $0.fileName = task.fileName
                $0.totalBytes = size
                $0.bytesReceived = size
            }
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
    /// With -N (`checkNewer`) the file there was compared with the server's first, and is
    /// replaced only by a newer version.
    func checkDestinationFree() throws {
        guard !mayReplaceDestination, let destination = task.destinationPath, FileOps.exists(destination) else {
            return
        }
        throw HaulError.destinationExists(destination, url: url)
    }

    /// Verifies and moves the part file into place.
    func finish(started: Duration) async throws -> DownloadResult {
        let part = try await openPart()
        let total = task.totalLength ?? committedBytes
        guard let destination = task.destinationPath, let partPath = task.partPath else {
            throw HaulError(.invalidResponse, "No file name chosen", url: url)
        }
        let checkpointer = lastCheckpoint
        lastCheckpoint = nil
        let pending = checkpointer?.take()
        try await syncFinished(part, total: total, at: partPath)
        // The connections' last checkpoint is true now that the file is synced. It is recorded
        // with the completion, in one transaction, unless something must read the segments
        // first (the pieces' check) or the file may yet not be placed: then now.
        var unrecorded: (Checkpointer, Checkpointer.Pending)?
        if let checkpointer, let pending { unrecorded = (checkpointer, pending) }
        func recordCheckpoint() async throws {
            guard let (checkpointer, pending) = unrecorded else { return }
            unrecorded = nil
            try await checkpointer.record(pending)
            recorder.adoptSegments(checkpointer.plan.records(taskID: task.id))
        }
        // Every piece matches its hash before the file is placed: those the connections'
        // checker has not verified (a stream of unknown length, a resumed file) are checked now.
        let pieces = try self.pieces?.verifier(forLength: total)
        if let pieces {
            try await recordCheckpoint()
            try await makeWorker(plan: SegmentPlan(segments, minSplit: .max), part: part).checkAllPieces(pieces)
        }
        try await checkWholeFile(part, total: total, destination: destination, partPath: partPath)
        var recordedWithPlacement = false
        do {
            recordedWithPlacement = try await place(
                part,
                from: partPath,
                to: destination,
                completing: unrecorded?.1.record
            )
        } catch {
            try await recordCheckpoint()
            throw error
        }
        partFile.relinquish()
        part.close()
        // A crash right here leaves the file in place and the task not yet completed; the
        // next run recognises it (see alreadyComplete) instead of calling it a stranger's file.
        try await recordCompleted(unrecorded, withPlacement: recordedWithPlacement)
        let fetched = progress.snapshot().bytesThisRun
        logger.info("completed", metadata: ["path": "\(destination)", "bytes": "\(total)"])
        var result = DownloadResult(
            taskID: task.id,
            path: destination,
            bytes: total,
            bytesFetched: fetched,
            resumedFrom: progress.snapshot().resumedFrom,
            alreadyComplete: false,
            elapsed: environment.timeline.now - started,
            lengthConfirmed: lengthConfirmed
        )
        result.sources = task.sources
        if let pieces { (result.piecesChecked, result.piecesRefetched) = pieces.tally }
        result.verifiedAgainst = verifiedAgainst(hadPieces: pieces != nil)
        result.isMetalink = Metalink.isMetalink(contentType: contentType, path: destination)
        return result
    }

    /// Records the completion of a file in place: with the run's last checkpoint, unless
    /// its placement recorded both already; or the state alone when there is none.
    private func recordCompleted(
        _ unrecorded: (Checkpointer, Checkpointer.Pending)?,
        withPlacement recorded: Bool
    ) async throws {
        guard let (checkpointer, pending) = unrecorded else {
            try await recorder.record(.completed, forgettingPart: true)
            return
        }
        if recorded {
            checkpointer.recorded(pending)
        } else {
            try await checkpointer.record(pending, completing: true)
        }
        recorder.adoptSegments(checkpointer.plan.records(taskID: task.id))
        recorder.completed(.completed)
        recorder.update {
            $0.partPath = nil
            $0.partIdentity = nil
        }
    }

    /// Moves the finished part file into place as the store's step making the task completed:
    /// with a shared queue, under this manager's claim, so that a pause or cancel from another
    /// manager cannot land between the claim's check and the file's placement (and the last
    /// checkpoint recorded in that step too). Returns whether that step recorded it.
    private func place(
        _ part: PartFile,
        from partPath: String,
        to destination: String,
        completing checkpoint: CheckpointRecord?
    ) async throws -> Bool {
        let replacing = mayReplaceDestination
        let (url, origin, logger) = (url, originToRecord, logger)
        return try await environment.placeFinished(task.id, checkpoint) {
            let labelled = try await FileIO.run {
                do {
                    // Never over another file unless asked to (checkDestinationFree): the
                    // rename itself refuses, so no file that appeared meanwhile is replaced.
                    try FileOps.rename(partPath, to: destination, replacing: replacing)
                } catch let error as HaulError where error.code == .destinationExists {
                    throw HaulError.destinationExists(destination, url: url)
                }
                // The finished file is the user's, not a part file; then where it came from
                // goes in the room the mark leaves: ext4 keeps a URL of up to about 56 bytes in
                // the inode, where beside the mark it took a block of its own.
                part.unmark()
                return origin.map { part.setAttribute(Transfer.originAttribute, to: $0) } ?? true
            }
            if !labelled {
                logger.debug("the file system keeps no extended attributes here", metadata: ["path": "\(destination)"])
            }
        }
    }

    /// Where a finished file came from, as freedesktop.org's convention (and wget --xattr)
    /// records it in `user.xdg.origin.url`: without credentials; nil when not asked for.
    private var originToRecord: String? {
        environment.setsOriginAttribute ? Redaction.url(HTTPTransport.withoutCredentials(task.url)) : nil
    }

    /// Gives the finished part file its length and the server's modification time (as
    /// asked), and syncs it. Blocking file work (truncate, fsync, reading the whole file for
    /// a digest, rename and the directory's fsync) runs on NIO's thread pool, never on
    /// Swift's cooperative threads.
    private func syncFinished(_ part: PartFile, total: Int64, at partPath: String) async throws {
        // The server's Last-Modified, as wget and `curl -R` set it; a date it cannot be is left out.
        let modified = environment.setsRemoteTime ? task.validators.lastModified.flatMap(HTTPDate.parse) : nil
        let timed = try await FileIO.run {
            if try part.size() != total { try part.truncate(to: total) }
            let timed = modified.map { part.setModificationTime($0) } ?? true
            try part.sync()
            return timed
        }
        if !timed { logger.notice("cannot set the file's modification time", metadata: ["path": "\(partPath)"]) }
    }

    /// Checks the whole file against the user's checksum, else the server's digest of it; a
    /// file that does not match is removed and the task starts over from zero.
    private func checkWholeFile(_ part: PartFile, total: Int64, destination: String, partPath: String) async throws {
        if let checksum = checksum ?? serverDigest?.checksum {
            let algorithm = checksum.algorithm
            let actual = try await FileIO.run { try part.digest(algorithm, length: total) }
            guard actual == checksum.hex else {
                // The bytes are wrong; keeping them would only make a rerun verify them again.
                try await partFile.removeMismatched(at: partPath)
                try await resetToZero(validators: Validators())
                let given = self.checksum != nil
                var error = HaulError(
                    .checksumMismatch,
                    given
                        ? "Checksum mismatch for \(destination): expected \(checksum.algorithm.name) \(checksum.hex), got \(actual)"
                        : "\(destination) does not match the digest its server sent (\(serverDigest?.header ?? "digest") \(checksum.algorithm.name) \(checksum.hex)): got \(actual)",
                    url: url,
                    path: destination,
                    hint: given
                        ? "Nothing was saved; check the checksum or the URL"
                        : "Nothing was saved; run it again, or drop the mirror that served other bytes"
                )
                error.underlying = nil
                throw error
            }
        }
    }

    /// Records how the run ended and turns any error into the ``HaulError`` to report.
    func conclude(after error: any Error) async -> HaulError {
        let stop = control.conclude()
        if partFile.file == nil, let error = error as? HaulError, error.code == .busy {
            return error  // Another process owns this download and its records.
        }
        if let error = error as? HaulError, error.code == .revoked {
            // Another manager holds the task now: nothing is recorded, nothing removed (its
            // part file may be the one that manager writes).
            await partFile.close()
            return error
        }
        // A cancelled run's partial data goes, deleted through its own locked handle (a sync
        // still in flight elsewhere would keep a reopening from it).
        await partFile.close(deleting: stop == .cancel)
        let resumeData = recorder.resumeData(pieces: pieces)
        do {
            switch stop {
            case .pause, .yield:
                try await recorder.record(stop == .pause ? .paused : .queued)
                var paused = HaulError(.paused, "Paused \(task.url) at \(committedBytes) bytes", url: url)
                paused.resumeData = resumeData
                return paused
            case .cancel:
                try await partFile.removeRecorded()
                try await recorder.record(.cancelled)
                return HaulError(.cancelled, "Cancelled \(task.url)", url: url)
            case nil:
                var failure =
                    error as? HaulError
                    ?? HaulError(.connection, "Download of \(task.url) failed", url: url, underlying: error)
                if failure.path == nil { failure.path = task.destinationPath }
                if committedBytes == 0 {
                    // Nothing kept (a 404, a refused connection, an untrusted certificate
                    // before the first byte): no empty part file is left behind, and there is
                    // nothing to resume, only to try again.
                    try await partFile.removeRecorded()
                    failure.hint = failure.hint?.replacingOccurrences(
                        of: HaulError.rerunToResume,
                        with: HaulError.rerunToRetry
                    )
                }
                if failure.code != .checksumMismatch, committedBytes > 0 { failure.resumeData = resumeData }
                if !environment.defersFailureRecord {
                    try await recorder.record(.failed, error: failure.description, code: failure.code)
                }
                return failure
            }
        } catch {
            return error as? HaulError
                ?? HaulError(.store, "Recording the end of \(task.url) failed", underlying: error)
        }
    }

    /// What the file's bytes were held to, in the order they are trusted
    /// (``DownloadResult/verifiedAgainst``).
    private func verifiedAgainst(hadPieces: Bool) -> String? {
        if checksum != nil { return "checksum" }
        if hadPieces || pieces?.verifier != nil { return "pieceHashes" }
        if let serverDigest { return serverDigest.header }
        return task.sources.count > 1 ? "sampled" : nil
    }
}
