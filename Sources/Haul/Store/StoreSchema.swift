import GRDB

/// A new store's schema, as the store's migrations (``Store/migrator``) leave an empty
/// database, made in one transaction: through the migrator a first run (a new `HAUL_HOME`)
/// compiled and ran 222 statements in 23 transactions, and a `haul get` of 1 KiB took 66 ms
/// instead of 51. Every migration is recorded as applied, so a later Haul runs only its own
/// new ones. ``StoreImage`` is the file SQLite makes of it, which a new store is written from.
///
/// The statements are SQLite's own text of the migrated schema (`sqlite_master`, in its
/// order). `StoreCreationTests` checks them against the migrations and, when a migration is
/// added, prints the statements to put here (and then the image).
enum StoreSchema {
    /// The schema's statements, in order (lines ending in `\` continue without a break).
    static let statements: [String] = [
        """
        CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY)
        """,
        """
        CREATE TABLE "task" ("id" TEXT PRIMARY KEY, "session" TEXT NOT NULL DEFAULT 'default', \
        "url" TEXT NOT NULL, "finalURL" TEXT, "directory" TEXT NOT NULL, "fileName" TEXT, \
        "explicitName" BOOLEAN NOT NULL, "requestHeaders" TEXT NOT NULL, "checksum" TEXT, \
        "overwrite" BOOLEAN NOT NULL DEFAULT 0, "state" TEXT NOT NULL, \
        "priority" INTEGER NOT NULL DEFAULT 0, "etag" TEXT, "lastModified" TEXT, "serverDate" TEXT, \
        "totalLength" INTEGER, "createdAt" DATETIME NOT NULL, "queuedAt" DATETIME NOT NULL, \
        "updatedAt" DATETIME NOT NULL, "errorMessage" TEXT, "queueOrder" INTEGER NOT NULL DEFAULT 0, \
        "background" BOOLEAN NOT NULL DEFAULT 0, "announcedState" TEXT, "connections" INTEGER, \
        "minSplitSize" INTEGER, "rateLimit" INTEGER, "partPath" TEXT, "partIdentity" TEXT, "tls" TEXT, \
        "proxy" TEXT, "credentials" TEXT, "cookies" TEXT, "nextTryAt" TEXT, "retryingSince" TEXT, \
        "allowsMetered" BOOLEAN NOT NULL DEFAULT 1, "errorCode" TEXT, \
        "checkNewer" BOOLEAN NOT NULL DEFAULT 0, "continuesExisting" BOOLEAN NOT NULL DEFAULT 0, \
        "hooks" TEXT, "sources" TEXT, "maxConnectionsPerServer" INTEGER, \
        "followsMetalink" BOOLEAN NOT NULL DEFAULT 1)
        """,
        """
        CREATE INDEX "task_on_url_directory" ON "task"("url", "directory")
        """,
        """
        CREATE INDEX "task_on_state_queuedAt" ON "task"("state", "queuedAt")
        """,
        """
        CREATE TABLE "segment" ("taskID" TEXT NOT NULL REFERENCES "task"("id") ON DELETE CASCADE, \
        "ordinal" INTEGER NOT NULL, "start" INTEGER NOT NULL, "end" INTEGER, \
        "committed" INTEGER NOT NULL, PRIMARY KEY ("taskID", "ordinal"))
        """,
        """
        CREATE INDEX "task_on_queueOrder" ON "task"("queueOrder")
        """,
        """
        CREATE TABLE "setting" ("name" TEXT PRIMARY KEY NOT NULL, "value" INTEGER NOT NULL)
        """,
        """
        CREATE UNIQUE INDEX task_one_per_destination
        ON task (url, directory, explicitName, CASE WHEN explicitName THEN fileName ELSE '' END)
        WHERE state != 'cancelled'
        """,
        """
        CREATE TABLE "textSetting" ("name" TEXT PRIMARY KEY NOT NULL, "value" TEXT NOT NULL)
        """,
        """
        CREATE TABLE "piece" ("taskID" TEXT PRIMARY KEY NOT NULL REFERENCES "task"("id") ON DELETE CASCADE, \
        "algorithm" TEXT NOT NULL, "length" INTEGER NOT NULL, "digests" BLOB NOT NULL, "verified" BLOB)
        """,
        """
        CREATE INDEX "task_on_background_state" ON "task"("background", "state")
        """,
        """
        CREATE INDEX task_on_partPath ON task (partPath) WHERE partPath IS NOT NULL
        """,
    ]

    /// Creates the schema in `db`, an empty database, and records `migrations` (every one
    /// the migrator has) as applied, all in one transaction.
    static func create(in db: Database, migrations: [String]) throws {
        try db.inTransaction {
            for statement in statements { try db.execute(sql: statement) }
            try db.execute(sql: "PRAGMA application_id = \(Store.applicationID)")
            let places = Array(repeating: "(?)", count: migrations.count).joined(separator: ", ")
            try db.execute(
                sql: "INSERT INTO grdb_migrations (identifier) VALUES \(places)",
                arguments: StatementArguments(migrations)
            )
            return .commit
        }
    }
}
