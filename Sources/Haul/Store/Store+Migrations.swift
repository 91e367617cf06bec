import GRDB

extension Store {
    /// The schema, as named migrations. A shipped migration is never edited: add a new one.
    static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1: tasks and segments") { db in
            try db.create(table: "task") { t in
                t.column("id", .text).primaryKey()
                t.column("session", .text).notNull().defaults(to: "default")
                t.column("url", .text).notNull()
                t.column("finalURL", .text)
                t.column("directory", .text).notNull()
                t.column("fileName", .text)
                t.column("explicitName", .boolean).notNull()
                t.column("requestHeaders", .text).notNull()
                t.column("checksum", .text)
                t.column("overwrite", .boolean).notNull().defaults(to: false)
                t.column("state", .text).notNull()
                t.column("priority", .integer).notNull().defaults(to: 0)
                t.column("etag", .text)
                t.column("lastModified", .text)
                t.column("serverDate", .text)
                t.column("totalLength", .integer)
                t.column("createdAt", .datetime).notNull()
                t.column("queuedAt", .datetime).notNull()
                t.column("updatedAt", .datetime).notNull()
                t.column("errorMessage", .text)
            }
            try db.create(index: "task_on_url_directory", on: "task", columns: ["url", "directory"])
            try db.create(index: "task_on_state_queuedAt", on: "task", columns: ["state", "queuedAt"])
            try db.create(table: "segment") { t in
                t.column("taskID", .text).notNull().references("task", onDelete: .cascade)
                t.column("ordinal", .integer).notNull()
                t.column("start", .integer).notNull()
                t.column("end", .integer)
                t.column("committed", .integer).notNull()
                t.primaryKey(["taskID", "ordinal"])
            }
        }
        migrator.registerMigration("v2: queue order") { db in
            try db.alter(table: "task") { t in
                t.add(column: "queueOrder", .integer).notNull().defaults(to: 0)
            }
            try db.execute(sql: "UPDATE task SET queueOrder = rowid")
            try db.create(index: "task_on_queueOrder", on: "task", columns: ["queueOrder"])
        }
        migrator.registerMigration("v3: background tasks and the session event log") { db in
            try db.alter(table: "task") { t in
                // Tasks of the background daemon, apart from those a `haul get` process runs.
                t.add(column: "background", .boolean).notNull().defaults(to: false)
                // The last state the event log announced for the task, so a crash between a
                // state change and its event is repaired on the next start.
                t.add(column: "announcedState", .text)
            }
            // This migration once also created the daemon's `event` and `session` tables; the
            // daemon's own migrations do now (HaulDaemon's EventLogSchema), and find those of
            // a store migrated before already there.
        }
        migrator.registerMigration("v4: segmented downloads and rate limits") { db in
            try db.alter(table: "task") { t in
                t.add(column: "connections", .integer)
                t.add(column: "minSplitSize", .integer)
                t.add(column: "rateLimit", .integer)
            }
        }
        migrator.registerMigration("v5: part files belong to one task") { db in
            try db.alter(table: "task") { t in
                // The part file the task created and owns, and its device:inode; NULL until
                // the task creates one. Part files of earlier versions carry no owner mark and
                // are left alone: those tasks start over in a new part file.
                t.add(column: "partPath", .text)
                t.add(column: "partIdentity", .text)
            }
            try db.create(index: "task_on_partPath", on: "task", columns: ["partPath"])
        }
        migrator.registerMigration("v6: settings kept across restarts") { db in
            // The daemon's limits as last changed, by name (see `StoredLimits`).
            try db.create(table: "setting") { t in
                t.primaryKey("name", .text)
                t.column("value", .integer).notNull()
            }
        }
        migrator.registerMigration("v7: the file says it is a Haul store") { db in
            try db.execute(sql: "PRAGMA application_id = \(Store.applicationID)")
        }
        migrator.registerMigration("v8: one task per URL and destination") { db in
            // Adds that raced in earlier versions could record one download twice. The newest
            // of each group stays (re-adds found it); the others are marked cancelled.
            try db.execute(
                sql: """
                    UPDATE task SET state = 'cancelled', errorMessage = 'A duplicate of a newer task for the same URL and file'
                    WHERE state != 'cancelled' AND EXISTS (
                        SELECT 1 FROM task AS newer
                        WHERE newer.state != 'cancelled' AND newer.url = task.url AND newer.directory = task.directory
                            AND newer.explicitName = task.explicitName
                            AND (NOT task.explicitName OR newer.fileName = task.fileName)
                            AND (newer.createdAt > task.createdAt OR (newer.createdAt = task.createdAt AND newer.rowid > task.rowid)))
                    """
            )
            try db.execute(
                sql: """
                    CREATE UNIQUE INDEX task_one_per_destination
                    ON task (url, directory, explicitName, CASE WHEN explicitName THEN fileName ELSE '' END)
                    WHERE state != 'cancelled'
                    """
            )
        }
        migrator.registerMigration("v9: TLS options per task") { db in
            try db.alter(table: "task") { t in
                // A JSON object (TLSOptions); NULL for the defaults.
                t.add(column: "tls", .text)
            }
        }
        migrator.registerMigration("v10: proxies per task") { db in
            try db.alter(table: "task") { t in
                // A JSON object (ProxySettings); NULL for none.
                t.add(column: "proxy", .text)
            }
        }
        migrator.registerMigration("v11: credentials and cookies per task") { db in
            try db.alter(table: "task") { t in
                // JSON objects (Credentials, CookieOptions); NULL for none and the defaults.
                t.add(column: "credentials", .text)
                t.add(column: "cookies", .text)
            }
        }
        migrator.registerMigration("v12: tasks that wait to try again") { db in
            try db.alter(table: "task") { t in
                // For a task in the state 'retrying': when it tries next; and when its streak
                // of tries began (the give-up time counts from it).
                t.add(column: "nextTryAt", .text)
                t.add(column: "retryingSince", .text)
            }
        }
        migrator.registerMigration("v13: metered networks") { db in
            try db.alter(table: "task") { t in
                t.add(column: "allowsMetered", .boolean).notNull().defaults(to: true)
            }
            // Settings that are not numbers (the metered interface patterns), by name.
            try db.create(table: "textSetting") { t in
                t.primaryKey("name", .text)
                t.column("value", .text).notNull()
            }
        }
        migrator.registerMigration("v14: events about no task") { db in
            // The daemon's log keeps events about the network, which concern no task; the
            // task of the others is in their payload, and this column was never read.
            // (A store made since v3 left the daemon's tables to it has no `event` table here.)
            if try db.tableExists("event"), try db.columns(in: "event").contains(where: { $0.name == "taskID" }) {
                try db.alter(table: "event") { t in t.drop(column: "taskID") }
            }
        }
        migrator.registerMigration("v15: checking for a newer version, continuing a file, hooks, error codes") { db in
            try db.alter(table: "task") { t in
                t.add(column: "errorCode", .text)
                t.add(column: "checkNewer", .boolean).notNull().defaults(to: false)
                t.add(column: "continuesExisting", .boolean).notNull().defaults(to: false)
                t.add(column: "hooks", .text)
            }
        }
        migrator.registerMigration("v16: mirrors") { db in
            try db.alter(table: "task") { t in
                t.add(column: "sources", .text)
                t.add(column: "maxConnectionsPerServer", .integer)
            }
        }
        migrator.registerMigration("v17: piece hashes, following Metalinks") { db in
            try db.alter(table: "task") { t in
                t.add(column: "followsMetalink", .boolean).notNull().defaults(to: true)
            }
            // A download's piece hashes (a Metalink's <pieces>) and which pieces are verified:
            // a row of its own, read only by the transfer, so lists never carry the digests.
            try db.create(table: "piece") { t in
                t.primaryKey("taskID", .text).references("task", onDelete: .cascade)
                t.column("algorithm", .text).notNull()
                t.column("length", .integer).notNull()
                // The digests, one after the other.
                t.column("digests", .blob).notNull()
                // One bit per piece (piece i: byte i / 8, bit i % 8); NULL for none.
                t.column("verified", .blob)
            }
        }
        migrator.registerMigration("v18: counts by state from an index") { db in
            // The daemon's counts by state (`haul status`, `/metrics`) read this index alone,
            // not every row: a million tasks counted in a fifth of the time.
            try db.create(index: "task_on_background_state", on: "task", columns: ["background", "state"])
        }
        migrator.registerMigration("v19: the part-file index holds only tasks that have one") { db in
            // A task claims its part file when it starts and forgets it when it ends: indexed
            // with every task, NULL and all, each of those moved the task's entry from one
            // end of an index of the whole queue to the other. Only running and paused tasks
            // have one, and only those are looked up by it (`partPath = ?`).
            try db.drop(index: "task_on_partPath")
            try db.execute(sql: "CREATE INDEX task_on_partPath ON task (partPath) WHERE partPath IS NOT NULL")
        }
        return migrator
    }

    /// The prefix of the names of migrations another module runs on this store — the
    /// daemon's event log (HaulDaemon's `EventLogSchema`) — after the store's own
    /// (``migrate(module:)``); the store's check for a newer Haul leaves those to that module.
    package static let moduleMigrationPrefix = "daemon "

    /// Whether a newer Haul migrated the store: it has a migration this `migrator` does not
    /// know, among the store's own (no ``moduleMigrationPrefix``), or among the module's.
    static func isSuperseded(_ db: Database, by migrator: DatabaseMigrator, module: Bool = false) throws -> Bool {
        let known = Set(migrator.migrations)
        return try migrator.appliedIdentifiers(db).contains { identifier in
            identifier.hasPrefix(moduleMigrationPrefix) == module && !known.contains(identifier)
        }
    }

    /// Runs another module's migrations on this store (each named with
    /// ``moduleMigrationPrefix``), once each, after the store's own.
    /// - Throws: ``HaulError/Code/store`` when a newer Haul ran one of that module's that
    ///   `migrator` does not know, or the store cannot be migrated.
    package func migrate(module migrator: DatabaseMigrator) async throws {
        try await FileIO.run { [writer] in
            let superseded = try writer.writeWithoutTransaction { db in
                try Store.isSuperseded(db, by: migrator, module: true)
            }
            if superseded {
                throw HaulError(
                    .store,
                    "The Haul store was written by a newer version of Haul",
                    hint: "Use that version, or point HAUL_HOME at another directory"
                )
            }
            do {
                try migrator.migrate(writer)
            } catch {
                throw HaulError(.store, "Cannot migrate the Haul store", underlying: error)
            }
        }
    }
}
