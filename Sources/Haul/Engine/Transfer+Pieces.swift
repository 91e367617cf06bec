import Foundation

/// A transfer's piece hashes: the verifier made once the file's length is known, what the
/// store says is verified kept only for bytes still committed (docs/architecture.md,
/// "Piece hashes").
extension Transfer {
    /// The verifier for a run of the connections over `plan`: pieces verified earlier whose
    /// bytes are still committed stay verified; those complete on disk but not verified are
    /// queued for checking first. Nil without piece hashes, or while the length is unknown
    /// (they are checked before the file is placed).
    func preparePieces(plan: SegmentPlan) throws -> PieceVerifier? {
        guard let verifier = try pieceVerifier(forLength: task.totalLength) else { return nil }
        verifier.reopen()
        verifier.keepVerified(where: plan.isWritten)
        verifier.enqueueUnverified(where: plan.isWritten)
        return verifier
    }

    /// Whether piece hashes will check every byte this run writes (its length is known).
    func preparesPieces() throws -> Bool {
        try pieceVerifier(forLength: task.totalLength) != nil
    }

    /// Before the file is placed: the verifier whose unverified pieces must be checked now.
    func checkAllPiecesFirst(total: Int64) throws -> PieceVerifier? {
        try pieceVerifier(forLength: total)
    }

    /// The file starts over: no piece of it is verified, in the store either (a crash before
    /// the next checkpoint must not find the old file's marks).
    func forgetVerifiedPieces() async throws {
        guard storedPieces != nil else { return }
        pieceVerifier?.reset()
        storedPieces?.verified = nil
        try await store.clearVerifiedPieces(of: task.id)
    }

    /// The verifier, made when the length is first known.
    /// - Throws: ``HaulError/Code/checksumMismatch`` when the piece hashes describe a file of
    ///   another length than the server's: it is not the file they were made for.
    private func pieceVerifier(forLength total: Int64?) throws -> PieceVerifier? {
        guard let stored = storedPieces, let total else { return nil }
        if let verifier = pieceVerifier, verifier.total == total { return verifier }
        if let problem = stored.hashes.problem(forLength: total) {
            throw HaulError(
                .checksumMismatch,
                "\(Redaction.url(url)) is not the file its piece hashes describe: \(problem)",
                url: url,
                hint: "Check the Metalink, or that its URLs serve the file it names"
            )
        }
        let verifier = PieceVerifier(hashes: stored.hashes, total: total, verified: stored.verified)
        pieceVerifier = verifier
        return verifier
    }
}
