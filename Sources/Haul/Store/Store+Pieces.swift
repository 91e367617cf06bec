import Foundation
import GRDB

/// A download's piece hashes and the bitmap of its verified pieces (table `piece`): written
/// with the task, read by its transfer, the bitmap updated by its checkpoints.
extension Store {
    /// What the store keeps of a task's pieces.
    struct StoredPieces: Sendable, Equatable {
        var hashes: PieceHashes
        /// One bit per piece; nil for none verified.
        var verified: [UInt8]?
    }

    /// Records `hashes` for a task that has none yet.
    static func insertPieces(_ db: Database, taskID: UUID, hashes: PieceHashes) throws {
        try db.execute(
            sql: "INSERT OR IGNORE INTO piece (taskID, algorithm, length, digests, verified) VALUES (?, ?, ?, ?, NULL)",
            arguments: [taskID, hashes.algorithm.name, hashes.length, Data(hashes.digests)]
        )
    }

    /// A task's piece hashes and verified pieces, nil when it has none. A row that cannot be
    /// piece hashes (another algorithm, a length out of bounds, digests cut short) is an
    /// unreadable store, as any other row would be; a bitmap of the wrong size counts as
    /// nothing verified (the pieces are checked again).
    func pieces(of id: UUID) async throws -> StoredPieces? {
        try await read { db in try Store.pieces(db, of: id) }
    }

    /// ``pieces(of:)`` within a read already open.
    static func pieces(_ db: Database, of id: UUID) throws -> StoredPieces? {
        guard
            let row = try Row.fetchOne(
                db.cachedStatement(sql: "SELECT algorithm, length, digests, verified FROM piece WHERE taskID = ?"),
                arguments: [id]
            )
        else { return nil }
        // Read without trapping on a value of another type: from outside, like any row.
        let name = String.fromDatabaseValue(row["algorithm"] as DatabaseValue)
        let length = Int64.fromDatabaseValue(row["length"] as DatabaseValue)
        let digests = Data.fromDatabaseValue(row["digests"] as DatabaseValue)
        guard let name, let algorithm = Checksum.Algorithm(named: name), let length,
            let digests, let hashes = PieceHashes(algorithm: algorithm, length: length, digests: Array(digests))
        else {
            throw HaulError(
                .store,
                "Task \(id) in the Haul store cannot be read: its piece hashes are not piece hashes",
                hint: "Remove it with 'haul remove \(id)', or point HAUL_HOME at another directory"
            )
        }
        let verified = Data.fromDatabaseValue(row["verified"] as DatabaseValue)
        let bitmap = verified.map { Array($0) }.flatMap { $0.count == (hashes.count + 7) / 8 ? $0 : nil }
        return StoredPieces(hashes: hashes, verified: bitmap)
    }

    /// Forgets which of a task's pieces are verified (its file starts over).
    func clearVerifiedPieces(of id: UUID) async throws {
        try await write { db in
            try db.execute(sql: "UPDATE piece SET verified = NULL WHERE taskID = ?", arguments: [id])
        }
    }
}
