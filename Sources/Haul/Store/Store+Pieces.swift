import Foundation
import GRDB

/// A download's piece hashes and the bitmap of its verified pieces (table `piece`): written
/// with the task, read by its transfer, the bitmap updated by its checkpoints.
extension Store {
    /// Records `hashes` for a task that has none yet.
    static func insertPieces(_ db: Database, taskID: UUID, hashes: PieceHashes) throws {
        try db.execute(
            sql: "INSERT OR IGNORE INTO piece (taskID, algorithm, length, digests, verified) VALUES (?, ?, ?, ?, NULL)",
            arguments: [taskID, hashes.algorithm.name, hashes.length, Data(hashes.digests)]
        )
    }

    /// A task's piece hashes and verified pieces, nil when it has none (checked:
    /// ``StoredPieces/init(task:algorithm:length:digests:verified:)``).
    package func pieces(of id: UUID) async throws -> StoredPieces? {
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
        return try StoredPieces(
            task: id,
            algorithm: String.fromDatabaseValue(row["algorithm"] as DatabaseValue),
            length: Int64.fromDatabaseValue(row["length"] as DatabaseValue),
            digests: Data.fromDatabaseValue(row["digests"] as DatabaseValue).map { Array($0) },
            verified: Data.fromDatabaseValue(row["verified"] as DatabaseValue).map { Array($0) }
        )
    }

    /// Forgets which of a task's pieces are verified (its file starts over).
    package func clearVerifiedPieces(of id: UUID) async throws {
        try await write { db in
            try db.execute(sql: "UPDATE piece SET verified = NULL WHERE taskID = ?", arguments: [id])
        }
    }
}
