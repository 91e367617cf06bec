import Foundation

/// The part file of a transfer: opened and locked, created beside the destination,
/// truncated when the download starts over, forgotten once moved into place.
extension Transfer {
    /// Forgets all partial data: truncates the part file and records offset 0 and the new
    /// validators in one transaction, before any byte of the new representation is written.
    /// - Parameter creatingPart: a download's first response: its part file, when it has
    ///   none, is made now and claimed in that transaction (one write, not two).
    func resetToZero(validators: Validators, creatingPart: Bool = false) async throws {
        task.validators = validators
        if let sources {
            // Mirrors are compared again with the bytes of the file that starts now.
            sources.forgetVerification()
            task.sources = sources.snapshot
        }
        // Pieces verified in the old file say nothing of the new one's.
        try await pieces?.forgetVerified()
        segments = [SegmentRecord(taskID: task.id, ordinal: 0, start: 0, end: validators.totalLength, committed: 0)]
        if part != nil || task.partPath.map(FileOps.exists) == true { try await openPart().truncate(to: 0) }
        // The first name only, and only when free: anything else is openPart's to settle.
        let made =
            creatingPart && part == nil
            ? task.destinationPath.flatMap { try? PartFile.create(at: $0 + ".part", owner: task.id) } : nil
        let claimed: Bool
        do {
            claimed = try await store.saveResponse(
                task,
                segments: segments,
                claimingPart: made.map { ($0.path, $0.identity) },
                recordingRunning: runningUnrecorded
            )
        } catch {
            if let made {
                FileOps.remove(made.path)
                made.close()
            }
            throw error
        }
        if runningUnrecorded {
            runningUnrecorded = false
            task.state = .running
            task.errorMessage = nil
        }
        if let made {
            if claimed {
                part = made
                task.partPath = made.path
                task.partIdentity = made.identity
            } else {
                // Another task's record names it: not this one's to use.
                FileOps.remove(made.path)
                made.close()
            }
        }
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
    func openPart() async throws -> PartFile {
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
                if committedBytes > 0 {
                    logger.warning("the part file is gone; starting over", metadata: ["path": "\(path)"])
                }
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
        // The bytes the store counted are not in this new file.
        if committedBytes > 0 { try await resetToZero(validators: task.validators) }
        return file
    }

    /// Creates a part file beside the destination, recorded as the task's: `NAME.part`, or
    /// `NAME.<id>.part` when a file (or another task's record) already has that name.
    func createPart(beside destination: String) async throws -> PartFile {
        let id = task.id.uuidString.lowercased()
        for candidate in [destination + ".part", destination + ".\(id.prefix(8)).part", destination + ".\(id).part"] {
            let file: PartFile
            do {
                file = try PartFile.create(at: candidate, owner: task.id)
            } catch PartFile.Claim.exists {
                // This task's own, from a run that stopped before recording it: adopt it.
                do {
                    file = try PartFile.openOwned(at: candidate, owner: task.id, identity: nil)
                    try file.truncate(to: 0)
                } catch is PartFile.Claim {
                    continue
                }
            }
            // Checked and recorded in one transaction: another task's record of this name (its
            // file gone, it may make it again) keeps the name; the file made here goes.
            if try await store.claimPart(task.id, path: file.path, identity: file.identity) { return file }
            FileOps.remove(candidate)
            file.close()
        }
        throw HaulError(
            .fileSystem,
            "Every part file name beside \(destination) is taken by other files",
            path: destination,
            hint:
                "Remove the stale \((destination as NSString).lastPathComponent).*.part files or choose another name with -o"
        )
    }

    /// Forgets the part file once it is gone (moved into place or deleted).
    func forgetPart() async throws {
        task.partPath = nil
        task.partIdentity = nil
        let (store, id) = (store, task.id)
        try await uncancellable { try await store.setPart(id, path: nil, identity: nil) }
    }
}
