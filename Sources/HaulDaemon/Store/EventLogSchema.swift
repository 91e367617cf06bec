import GRDB
import Haul

/// The daemon's tables in a SQLite store — the per-session event log and the clients'
/// acknowledgements (Store+EventLog.swift) — and their migrations, which the daemon runs
/// on its store after the store's own (``Store/migrate(module:)``). PostgreSQL's are in
/// HaulPostgres's schema, beside the tables of the store they live in.
enum EventLogSchema {
    /// The migrations, each named with ``Store/moduleMigrationPrefix``. A shipped one is
    /// never edited: add a new one.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("daemon v1: the session event log") { db in
            // A store migrated before the daemon kept its own migrations has these tables
            // already, from the store's v3 and v14: as this creates them.
            // AUTOINCREMENT: ids never repeat, even after acknowledged events are deleted.
            try db.create(table: "event", options: .ifNotExists) { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("session", .text).notNull()
                t.column("payload", .text).notNull()
                t.column("createdAt", .datetime).notNull()
            }
            try db.create(index: "event_on_session_id", on: "event", columns: ["session", "id"], options: .ifNotExists)
            try db.create(table: "session", options: .ifNotExists) { t in
                t.primaryKey("name", .text)
                t.column("acknowledged", .integer).notNull().defaults(to: 0)
            }
        }
        return migrator
    }
}

extension Store {
    /// Brings the daemon's tables in this store to this Haul's schema (``EventLogSchema``).
    /// - Throws: ``HaulError/Code/store`` when a newer Haul's daemon migrated them, or they
    ///   cannot be migrated.
    package func migrateEventLog() async throws {
        try await migrate(module: EventLogSchema.migrator)
    }
}
