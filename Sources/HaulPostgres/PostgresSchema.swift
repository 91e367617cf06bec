import Foundation
import Haul
import Logging
import PostgresNIO
import _ConnectionPoolModule

/// Haul's tables in PostgreSQL and their migrations: the fleet's queue (``FleetQueue``) and
/// the tasks, segments, pieces and settings (``PostgresStore``), in one schema, migrated
/// once by whichever node starts first.
enum PostgresSchema {
    /// The advisory lock key of migrations.
    static let migrationLock: Int64 = 0x4841_554c_0001

    /// The migrations, in order, each a list of statements run in one transaction, once.
    static let migrations: [[String]] = [
        [
            """
            CREATE TABLE fleet_task (
                id uuid PRIMARY KEY,
                host text NOT NULL,
                priority integer NOT NULL DEFAULT 0,
                queue_order bigserial NOT NULL,
                state text NOT NULL DEFAULT 'queued'
                    CHECK (state IN ('queued', 'running', 'paused', 'completed', 'failed', 'cancelled')),
                owner text,
                lease_expires timestamptz,
                fence bigint NOT NULL DEFAULT 0,
                committed bigint NOT NULL DEFAULT 0 CHECK (committed >= 0)
            )
            """,
            "CREATE INDEX fleet_task_queue ON fleet_task (priority DESC, queue_order) WHERE state = 'queued'",
            "CREATE INDEX fleet_task_leased ON fleet_task (lease_expires) WHERE state = 'running'",
            """
            CREATE TABLE fleet_node (
                name text PRIMARY KEY,
                started_at timestamptz NOT NULL DEFAULT now(),
                heartbeat_at timestamptz NOT NULL DEFAULT now()
            )
            """,
        ],
        [
            "ALTER TABLE fleet_node ADD COLUMN bytes_per_second double precision NOT NULL DEFAULT 0",
            "ALTER TABLE fleet_node ADD COLUMN stopped_at timestamptz",
            "CREATE INDEX fleet_task_owner ON fleet_task (owner) WHERE state = 'running'",
        ],
        [
            // The tasks as the manager keeps them (PostgresStore): the columns of SQLite's
            // `task` table, by the same names, so one record type reads both.
            """
            CREATE TABLE haul_task (
                id uuid PRIMARY KEY,
                session text NOT NULL,
                url text NOT NULL,
                "finalURL" text,
                directory text NOT NULL,
                "fileName" text,
                "explicitName" boolean NOT NULL,
                "requestHeaders" text NOT NULL,
                checksum text,
                overwrite boolean NOT NULL,
                state text NOT NULL,
                priority bigint NOT NULL,
                etag text,
                "lastModified" text,
                "serverDate" text,
                "totalLength" bigint,
                "createdAt" text NOT NULL,
                "queuedAt" text NOT NULL,
                "updatedAt" text NOT NULL,
                "errorMessage" text,
                "errorCode" text,
                "queueOrder" bigint NOT NULL,
                background boolean NOT NULL,
                connections bigint,
                "minSplitSize" bigint,
                "rateLimit" bigint,
                "partPath" text,
                "partIdentity" text,
                tls text,
                proxy text,
                credentials text,
                cookies text,
                "nextTryAt" text,
                "allowsMetered" boolean NOT NULL,
                "checkNewer" boolean NOT NULL,
                "continuesExisting" boolean NOT NULL,
                hooks text,
                sources text,
                "maxConnectionsPerServer" bigint,
                "retryingSince" text,
                "followsMetalink" boolean NOT NULL,
                "announcedState" text
            )
            """,
            "CREATE SEQUENCE haul_queue_order",
            "CREATE INDEX haul_task_queue ON haul_task (\"queueOrder\")",
            "CREATE INDEX haul_task_state ON haul_task (state, \"queueOrder\")",
            // One unfinished-or-completed task per URL and destination, as in SQLite.
            """
            CREATE UNIQUE INDEX haul_task_one_per_destination ON haul_task
                (url, directory, "explicitName", (CASE WHEN "explicitName" THEN "fileName" ELSE '' END))
                WHERE state <> 'cancelled'
            """,
            """
            CREATE TABLE haul_segment (
                "taskID" uuid NOT NULL REFERENCES haul_task (id) ON DELETE CASCADE,
                ordinal bigint NOT NULL,
                start bigint NOT NULL,
                "end" bigint,
                committed bigint NOT NULL,
                PRIMARY KEY ("taskID", ordinal)
            )
            """,
            """
            CREATE TABLE haul_piece (
                "taskID" uuid PRIMARY KEY REFERENCES haul_task (id) ON DELETE CASCADE,
                algorithm text NOT NULL,
                length bigint NOT NULL,
                digests bytea NOT NULL,
                verified bytea
            )
            """,
            "CREATE TABLE haul_setting (name text PRIMARY KEY, value bigint NOT NULL)",
            "CREATE TABLE haul_text_setting (name text PRIMARY KEY, value text NOT NULL)",
        ],
        [
            // The daemons' session event logs (PostgresStore as an EventLogStore): ids from
            // a sequence never reused, appended one transaction at a time (an advisory lock)
            // so that ids become visible in order.
            """
            CREATE TABLE haul_event (
                id bigserial PRIMARY KEY,
                session text NOT NULL,
                payload text NOT NULL,
                created_at timestamptz NOT NULL DEFAULT now()
            )
            """,
            "CREATE INDEX haul_event_session ON haul_event (session, id)",
            "CREATE TABLE haul_session (name text PRIMARY KEY, acknowledged bigint NOT NULL DEFAULT 0)",
        ],
        [
            // The leases move onto the tasks' own rows, so that a task's state and its lease
            // change in one statement. fleet_task only ever held ids queued by the fleet
            // queue alone (no download to run), so it goes with nothing to carry over.
            "ALTER TABLE haul_task ADD COLUMN host text NOT NULL DEFAULT ''",
            "ALTER TABLE haul_task ADD COLUMN owner text",
            "ALTER TABLE haul_task ADD COLUMN fence bigint NOT NULL DEFAULT 0",
            "ALTER TABLE haul_task ADD COLUMN lease_expires timestamptz",
            """
            CREATE INDEX haul_task_waiting ON haul_task (priority DESC, "queueOrder")
                WHERE state = 'queued' AND background
            """,
            "CREATE INDEX haul_task_owner ON haul_task (owner) WHERE owner IS NOT NULL",
            "DROP TABLE fleet_task",
        ],
        [
            // When the lease was taken: lowering the fleet's cap sends the most recently
            // started tasks back first.
            "ALTER TABLE haul_task ADD COLUMN leased_at timestamptz"
        ],
        [
            // PostgreSQL's own types for what SQLite keeps as text: times as timestamptz
            // (the text was UTC, to the millisecond), the structured columns as jsonb (the
            // server checks each is JSON), and the states a task can be in, checked.
            """
            ALTER TABLE haul_task
                ALTER COLUMN "createdAt" TYPE timestamptz USING ("createdAt"::timestamp AT TIME ZONE 'UTC'),
                ALTER COLUMN "queuedAt" TYPE timestamptz USING ("queuedAt"::timestamp AT TIME ZONE 'UTC'),
                ALTER COLUMN "updatedAt" TYPE timestamptz USING ("updatedAt"::timestamp AT TIME ZONE 'UTC'),
                ALTER COLUMN "nextTryAt" TYPE timestamptz USING ("nextTryAt"::timestamp AT TIME ZONE 'UTC'),
                ALTER COLUMN "retryingSince" TYPE timestamptz
                    USING ("retryingSince"::timestamp AT TIME ZONE 'UTC'),
                ALTER COLUMN "requestHeaders" TYPE jsonb USING "requestHeaders"::jsonb,
                ALTER COLUMN tls TYPE jsonb USING tls::jsonb,
                ALTER COLUMN proxy TYPE jsonb USING proxy::jsonb,
                ALTER COLUMN credentials TYPE jsonb USING credentials::jsonb,
                ALTER COLUMN cookies TYPE jsonb USING cookies::jsonb,
                ALTER COLUMN hooks TYPE jsonb USING hooks::jsonb,
                ALTER COLUMN sources TYPE jsonb USING sources::jsonb
            """,
            """
            ALTER TABLE haul_task ADD CONSTRAINT haul_task_state CHECK (state IN
                ('queued', 'running', 'paused', 'completed', 'failed', 'retrying', 'waitingForNetwork', 'cancelled'))
            """,
            """
            ALTER TABLE haul_task ADD CONSTRAINT haul_task_announced_state CHECK ("announcedState" IN
                ('queued', 'running', 'paused', 'completed', 'failed', 'retrying', 'waitingForNetwork', 'cancelled'))
            """,
        ],
        [
            // Each node's own capacity (its downloads, connections and link), and what it
            // runs at once and its rate limit as the others see them. The fleet-wide downloads and per-host limits
            // kept so far become the fleet's caps; the rate and connections, which each node
            // applied on its own, become each known node's.
            """
            CREATE TABLE haul_node_setting (
                node text NOT NULL, name text NOT NULL, value bigint NOT NULL, PRIMARY KEY (node, name))
            """,
            "ALTER TABLE fleet_node ADD COLUMN max_running integer NOT NULL DEFAULT 0",
            "ALTER TABLE fleet_node ADD COLUMN rate_limit bigint NOT NULL DEFAULT 0",
            // A drain asked of the node (`haul daemon drain`): since when, and whether it lets
            // its downloads finish first.
            "ALTER TABLE fleet_node ADD COLUMN draining_at timestamptz",
            "ALTER TABLE fleet_node ADD COLUMN drain_finishing boolean NOT NULL DEFAULT false",
            """
            INSERT INTO haul_node_setting (node, name, value)
            SELECT n.name, s.name, s.value FROM fleet_node n
            JOIN haul_setting s ON s.name IN ('overallRateLimit', 'hostConnections')
            """,
            "DELETE FROM haul_setting WHERE name IN ('overallRateLimit', 'hostConnections')",
            "UPDATE haul_setting SET name = 'fleetMaxConcurrentDownloads' WHERE name = 'maxConcurrentDownloads'",
            "UPDATE haul_setting SET name = 'fleetMaxDownloadsPerHost' WHERE name = 'maxConnectionsPerHost'",
        ],
        [
            // A run claiming its part file asks whether another task names it: by index, as
            // in SQLite, not by reading every task.
            "CREATE INDEX haul_task_part ON haul_task (\"partPath\") WHERE \"partPath\" IS NOT NULL"
        ],
    ]

    /// Creates or upgrades the schema. Several nodes may start at once: one migrates while
    /// the others wait on an advisory lock, then find nothing left to do.
    /// - Throws: ``HaulError/Code/store`` when the database has a newer schema than this
    ///   Haul knows, or cannot be changed.
    static func migrate(_ client: PostgresClient, logger: Logger) async throws {
        try await Postgres.run("migrate Haul's tables") {
            try await client.withConnection { connection in
                // A migration is no lease: on a loaded machine its statements may be seconds
                // apart, and the server would end it for idling past the lease. RESET gives
                // the pooled connection its own setting back.
                _ = try await connection.checkedQuery("SET idle_in_transaction_session_timeout = 0", logger: logger)
                _ = try await connection.checkedQuery("SELECT pg_advisory_lock(\(migrationLock))", logger: logger)
                do {
                    try await runMigrations(connection, logger: logger)
                } catch {
                    _ = try? await connection.checkedQuery(
                        "SELECT pg_advisory_unlock(\(migrationLock))",
                        logger: logger
                    )
                    _ = try? await connection.checkedQuery("RESET idle_in_transaction_session_timeout", logger: logger)
                    throw error
                }
                _ = try await connection.checkedQuery("SELECT pg_advisory_unlock(\(migrationLock))", logger: logger)
                _ = try await connection.checkedQuery("RESET idle_in_transaction_session_timeout", logger: logger)
            }
        }
    }

    private static func runMigrations(_ connection: PostgresConnection, logger: Logger) async throws {
        _ = try await connection.checkedQuery(
            """
            CREATE TABLE IF NOT EXISTS haul_migration (
                version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())
            """,
            logger: logger
        )
        var applied = 0
        for try await version in try await connection.checkedQuery(
            "SELECT COALESCE(MAX(version), 0) FROM haul_migration",
            logger: logger
        ).decode(Int.self) {
            applied = version
        }
        guard applied <= migrations.count else {
            throw HaulError(
                .store,
                "The fleet's database was set up by a newer Haul (schema \(applied), this one knows \(migrations.count))",
                hint: "Run the same version of Haul on every node"
            )
        }
        for (index, statements) in migrations.enumerated() where index + 1 > applied {
            let version = index + 1
            try await connection.withCheckedTransaction(logger: logger) { connection in
                for sql in statements {
                    _ = try await connection.checkedQuery(PostgresQuery(unsafeSQL: sql), logger: logger)
                }
                _ = try await connection.checkedQuery(
                    "INSERT INTO haul_migration (version) VALUES (\(version))",
                    logger: logger
                )
            }
        }
    }
}

/// What every PostgreSQL operation shares: its failure in one sentence.
enum Postgres {
    /// Runs a database operation. A Haul error (a refusal from inside a transaction) goes
    /// through as it is; any other failure is one sentence naming what was being done, in
    /// the server's words when it said any.
    ///
    /// A transaction the server rolled back to break a deadlock or a serialisation conflict
    /// (SQLSTATE 40P01, 40001) is run again, a few times, after a short random wait: nothing
    /// of it was written, and the other side of the conflict goes on.
    static func run<T>(_ what: String, _ body: () async throws -> T) async throws -> T {
        var attempt = 0
        while true {
            do {
                return try await body()
            } catch {
                if let error = haulError(in: error) { throw error }
                attempt += 1
                if attempt < maxAttempts, isConflict(error) {
                    try await Task.sleep(for: .milliseconds(Int.random(in: 5...20) << attempt))
                    continue
                }
                throw HaulError(.store, "Cannot \(what) in PostgreSQL: \(reason(error))")
            }
        }
    }

    /// How many times a transaction runs before a conflict is reported.
    static let maxAttempts = 5

    /// Whether the server rolled `error`'s transaction back for a deadlock or a
    /// serialisation conflict, which running it again resolves.
    static func isConflict(_ error: any Error) -> Bool {
        if let error = error as? PostgresTransactionError {
            for inner in [error.closureError, error.beginError, error.commitError] {
                if let inner, isConflict(inner) { return true }
            }
            return false
        }
        guard let error = error as? PSQLError, let state = error.serverInfo?[.sqlState] else { return false }
        return state == "40P01" || state == "40001"
    }

    /// The Haul error a transaction's body threw, if that is what failed.
    static func haulError(in error: any Error) -> HaulError? {
        if let error = error as? HaulError { return error }
        if let error = error as? PostgresTransactionError, let inner = error.closureError {
            return haulError(in: inner)
        }
        return nil
    }

    /// What went wrong, in the server's words when it said any; never a type dump.
    static func reason(_ error: any Error) -> String {
        if let error = error as? PostgresTransactionError {
            for inner in [error.closureError, error.beginError, error.commitError, error.rollbackError] {
                if let inner { return reason(inner) }
            }
        }
        if let error = error as? HaulError { return error.message }
        if let error = error as? PSQLError {
            if let message = error.serverInfo?[.message] { return message }
            switch error.code {
            case .connectionError, .serverClosedConnection, .clientClosedConnection, .uncleanShutdown:
                return "the connection to the database failed or was closed"
            case .queryCancelled: return "the query was cancelled"
            case .tooManyParameters: return "too many values in one query"
            default: return "the database client failed (\(error.code))"
            }
        }
        if error is CancellationError { return "it was cancelled" }
        if error is ConnectionClosed {
            return
                "the database had closed the connection (it was restarted or stopped, or it ended a transaction left idle past the lease)"
        }
        if let error = error as? ConnectionPoolError {
            switch error {
            case .connectionCreationCircuitBreakerTripped:
                return
                    "the database has refused or not answered connections for a minute (is PostgreSQL running and reachable?); Haul keeps trying to reconnect"
            case .poolShutdown: return "the store is closing"
            case .requestCancelled: return "it was cancelled"
            default: break
            }
        }
        return "the database client failed"
    }
}
