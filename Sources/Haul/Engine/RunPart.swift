import Foundation
import Logging

/// One run's part file: opened and locked, created beside the destination, truncated when
/// the download starts over, deleted or handed over to be moved into place at the end.
///
/// Every system call it makes — `open`, `flock`, the extended attributes, `ftruncate`,
/// `pread`, `unlink`, `stat` — runs on ``FileIO``'s threads, never on Swift's cooperative
/// pool. Which file is the task's is the store's to say: the ``RunRecorder`` claims each
/// name before a byte is written into it. A file that is not this task's — another
/// download's part file, a file Haul did not create, a hard link, a symbolic link — is
/// never written into: the download starts over in a part file of its own.
final class RunPart {
    /// The open, locked file, once opened.
    private(set) var file: PartFile?
    /// NAME.part being made while a new download's first request is under way (``makeAhead()``).
    private var ahead: Task<PartFile?, Never>?
    private let recorder: RunRecorder
    private let logger: Logger

    init(recorder: RunRecorder, logger: Logger) {
        self.recorder = recorder
        self.logger = logger
    }

    private var task: TaskRecord { recorder.task }

    /// The task's part file, opened and locked: the one it created, when that is still there
    /// and still its own; else a new one, recorded as the task's. `new` says the file is a
    /// new, empty one where the task had bytes recorded: the caller starts over.
    func open() async throws -> (file: PartFile, new: Bool) {
        if let file { return (file, false) }
        guard let destination = task.destinationPath else {
            throw HaulError(.invalidResponse, "No file name chosen before writing", url: task.url)
        }
        if let path = task.partPath {
            let (owner, identity) = (task.id, task.partIdentity)
            do {
                let opened = try await FileIO.run { try PartFile.openOwned(at: path, owner: owner, identity: identity) }
                file = opened
                return (opened, false)
            } catch PartFile.Claim.missing {
                if recorder.committedBytes > 0 {
                    logger.warning("the part file is gone; starting over", metadata: ["path": "\(path)"])
                }
            } catch let PartFile.Claim.foreign(reason) {
                logger.warning(
                    "leaving alone a file that is not this download's part file; starting over in a new one",
                    metadata: ["path": "\(path)", "reason": "\(reason)"]
                )
            }
        }
        let made = try await create(beside: destination)
        file = made
        recorder.notePart(made)
        return (made, true)
    }

    /// Creates a part file beside the destination, recorded as the task's: `NAME.part`, or
    /// `NAME.<id>.part` when a file (or another task's record) already has that name.
    private func create(beside destination: String) async throws -> PartFile {
        let owner = task.id
        let id = owner.uuidString.lowercased()
        for candidate in [destination + ".part", destination + ".\(id.prefix(8)).part", destination + ".\(id).part"] {
            let made: PartFile? = try await FileIO.run {
                do {
                    return try PartFile.create(at: candidate, owner: owner)
                } catch PartFile.Claim.exists {
                    // This task's own, from a run that stopped before recording it: adopt it.
                    do {
                        let file = try PartFile.openOwned(at: candidate, owner: owner, identity: nil)
                        try file.truncate(to: 0)
                        return file
                    } catch is PartFile.Claim {
                        return nil
                    }
                }
            }
            guard let made else { continue }
            // Checked and recorded in one transaction: another task's record of this name (its
            // file gone, it may make it again) keeps the name; the file made here goes.
            if try await recorder.claimPart(made) { return made }
            await discard(made)
        }
        throw HaulError(
            .fileSystem,
            "Every part file name beside \(destination) is taken by other files",
            path: destination,
            hint:
                "Remove the stale \((destination as NSString).lastPathComponent).*.part files or choose another name with -o"
        )
    }

    /// Starts making `NAME.part` for a download's first response while its request is under
    /// way, when the name is known and nothing is open: the file work (and, at a process's
    /// first download, the file threads' start) waits for the network instead of the response
    /// waiting for it. ``makeFirst()`` takes it; ``close(deleting:)`` removes it when no
    /// response did.
    func makeAhead() {
        guard ahead == nil, file == nil, let destination = task.destinationPath else { return }
        let owner = task.id
        ahead = Task { try? await FileIO.run { try PartFile.create(at: destination + ".part", owner: owner) } }
    }

    /// The part file for a download's first response, when it has none: `NAME.part`, made
    /// now (or ahead) only when that name is free (anything else is ``open()``'s to settle),
    /// to be claimed with the response's record. Nil when there is none to make.
    func makeFirst() async -> PartFile? {
        makeAhead()  // Nothing when one is under way already, or there is none to make.
        guard let ahead else { return nil }
        self.ahead = nil
        let made = await ahead.value
        // Opened meanwhile (`open()`): the one made ahead is nobody's.
        guard file == nil, let made else {
            if let made { await discard(made) }
            return nil
        }
        return made
    }

    /// Keeps `made` (from ``makeFirst()``) as the run's part file once the store claimed it.
    func keep(_ made: PartFile) { file = made }

    /// Takes a file Haul did not create as the part file (`--continue`), moved to `partPath`
    /// when given. Throws ``PartFile/Claim`` when it cannot be this task's.
    func adopt(at path: String, movingTo partPath: String?) async throws -> PartFile {
        let owner = task.id
        let adopted = try await FileIO.run { try PartFile.adopt(at: path, movingTo: partPath, owner: owner) }
        file = adopted
        return adopted
    }

    /// Removes and closes a file made for this run that the store gave to no one.
    func discard(_ made: PartFile) async {
        await cleanUp {
            FileOps.remove(made.path)
            made.close()
        }
    }

    /// Empties the part file, when there is one: the download starts over.
    func truncate() async throws {
        guard file != nil || task.partPath != nil else { return }
        if file == nil, let path = task.partPath, !(try await FileIO.run { FileOps.exists(path) }) { return }
        let (opened, _) = try await open()
        try await FileIO.run { try opened.truncate(to: 0) }
    }

    /// The part file's size on disk, opening it.
    func size() async throws -> Int64 {
        let (opened, _) = try await open()
        return try await FileIO.run { try opened.size() }
    }

    /// `count` bytes at `offset` of the part file, opening it.
    func read(at offset: Int64, count: Int) async throws -> [UInt8] {
        let (opened, _) = try await open()
        return try await FileIO.run { try opened.read(at: offset, count: count) }
    }

    /// Gives up the handle without closing it: the file was moved into place.
    func relinquish() { file = nil }

    /// Closes the part file, deleting it first when `deleting` (a cancelled run's partial
    /// data goes through its own locked handle: a sync still in flight elsewhere would keep a
    /// reopening from it).
    func close(deleting: Bool = false) async {
        if let ahead {
            self.ahead = nil
            if let made = await ahead.value { await discard(made) }
        }
        guard let open = file else { return }
        file = nil
        await cleanUp {
            if deleting { open.delete() }
            open.close()
        }
    }

    /// Deletes the part file the task records, and nothing that is not it; then forgets it.
    func removeRecorded() async throws {
        guard let path = task.partPath else { return }
        let (owner, identity) = (task.id, task.partIdentity)
        await cleanUp { PartFile.remove(at: path, owner: owner, identity: identity) }
        try await recorder.forgetPart()
    }

    /// Deletes a part file whose bytes are wrong (a failed checksum) and forgets it.
    func removeMismatched(at path: String) async throws {
        let open = file
        file = nil
        await cleanUp {
            FileOps.remove(path)
            open?.close()
        }
        try await recorder.forgetPart()
    }

    /// Runs clean-up file work to its end on ``FileIO``'s threads, even for a run that was
    /// stopped (cancelled): what a run leaves behind must not depend on how it ended.
    private func cleanUp(_ work: @escaping @Sendable () -> Void) async {
        _ = try? await uncancellable { try await FileIO.run(work) }
    }
}
