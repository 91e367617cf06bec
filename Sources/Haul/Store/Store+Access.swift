import Foundation
import GRDB

// MARK: - Access: every read and write, and its failure in one sentence

extension Store {
    package func read<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do {
            return try await writer.read(body)
        } catch {
            throw Store.failure("Reading", error, path: writer.path)
        }
    }

    package func write<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        do {
            return try await commits.write(body)
        } catch {
            throw Store.failure("Writing", error, path: writer.path)
        }
    }

    /// One sentence for a failed store access: a full disk or a read-only store said as
    /// such, anything else with SQLite's own message (never a library type dump).
    static func failure(_ access: String, _ error: any Error, path: String) -> HaulError {
        if let error = error as? HaulError { return error }
        if error is CancellationError { return HaulError(.cancelled, "\(access) the Haul store was cancelled") }
        guard let sqlite = error as? DatabaseError else {
            return HaulError(.store, "\(access) the Haul store at \(path) failed", path: path, underlying: error)
        }
        switch sqlite.resultCode {
        case .SQLITE_FULL:
            // A `.store` error, not `.diskFull`: what could not be recorded is Haul's
            // bookkeeping, which the daemon records again once it can (not the download's data).
            return HaulError(
                .store,
                "No space left on device for the Haul store at \(path)",
                path: path,
                hint: "Free some space on that disk; the daemon goes on by itself, a 'haul get' resumes when run again"
            )
        case .SQLITE_READONLY, .SQLITE_PERM, .SQLITE_CANTOPEN:
            return HaulError(
                .store,
                "\(access) the Haul store at \(path) failed: \(sqlite.message ?? "it cannot be written")",
                path: path,
                hint: "Check the permissions of HAUL_HOME, or point HAUL_HOME at a writable directory"
            )
        default:
            var failure = HaulError(
                .store,
                "\(access) the Haul store at \(path) failed: \(sqlite.message ?? "SQLite error \(sqlite.resultCode.rawValue)")",
                path: path
            )
            if sqlite.resultCode == .SQLITE_BUSY || sqlite.resultCode == .SQLITE_LOCKED {
                failure.hint = "Another process holds the store; try again"
            }
            return failure
        }
    }
}
