import Foundation

/// A run's piece hashes: the verifier made once the file's length is known, and what the
/// store says is verified, kept only for bytes still committed (docs/architecture.md,
/// "Piece hashes"). A download without piece hashes has none.
final class RunPieces {
    /// The hashes and the pieces verified, as the store had them when the run began.
    private(set) var stored: StoredPieces
    /// The verifier, once the length is known.
    private(set) var verifier: PieceVerifier?
    private let taskID: UUID
    private let url: URL
    private let store: any TaskStore

    init(_ stored: StoredPieces, taskID: UUID, url: URL, store: any TaskStore) {
        self.stored = stored
        self.taskID = taskID
        self.url = url
        self.store = store
    }

    /// The verifier for a run of the connections over `plan` of a file of `total` bytes:
    /// pieces verified earlier whose bytes are still committed stay verified; those complete
    /// on disk but not verified are queued for checking first. Nil while the length is
    /// unknown (they are checked before the file is placed).
    func prepare(plan: SegmentPlan, total: Int64?) throws -> PieceVerifier? {
        guard let verifier = try verifier(forLength: total) else { return nil }
        verifier.reopen()
        verifier.keepVerified(where: plan.isWritten)
        verifier.enqueueUnverified(where: plan.isWritten)
        return verifier
    }

    /// The verifier for a file of `total` bytes, made when the length is first known; nil
    /// while it is unknown. Before the file is placed, its unverified pieces are checked.
    /// - Throws: ``HaulError/Code/checksumMismatch`` when the piece hashes describe a file of
    ///   another length than the server's: it is not the file they were made for.
    func verifier(forLength total: Int64?) throws -> PieceVerifier? {
        guard let total else { return nil }
        if let verifier, verifier.total == total { return verifier }
        if let problem = stored.hashes.problem(forLength: total) {
            throw HaulError(
                .checksumMismatch,
                "\(Redaction.url(url)) is not the file its piece hashes describe: \(problem)",
                url: url,
                hint: "Check the Metalink, or that its URLs serve the file it names"
            )
        }
        let made = PieceVerifier(hashes: stored.hashes, total: total, verified: stored.verified)
        verifier = made
        return made
    }

    /// The file starts over: no piece of it is verified, in the store either (a crash before
    /// the next checkpoint must not find the old file's marks).
    func forgetVerified() async throws {
        verifier?.reset()
        stored.verified = nil
        try await store.clearVerifiedPieces(of: taskID)
    }
}
