import Foundation
import Haul
import Logging
import PostgresNIO

/// The fleet's settings in PostgreSQL (`haul_setting`, `haul_text_setting`): the limits and
/// the metered networks every node obeys. A change is signalled to the other nodes in its
/// own transaction (``FleetSignals``), so each reads it at once.
struct PostgresSettings {
    let client: PostgresClient
    let logger: Logger

    func numeric() async throws -> [(name: String, value: Int64?)] {
        try await Postgres.run("read the settings") {
            var settings: [(name: String, value: Int64?)] = []
            for try await (name, value) in try await client.query(
                "SELECT name, value FROM haul_setting",
                logger: logger
            ).decode((String, Int64?).self) {
                settings.append((name, value))
            }
            return settings
        }
    }

    func saveNumeric(_ values: [(name: String, value: Int64)]) async throws {
        try await Postgres.run("save the settings") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                for (name, value) in values {
                    _ = try await connection.checkedQuery(
                        """
                        INSERT INTO haul_setting (name, value) VALUES (\(name), \(value))
                        ON CONFLICT (name) DO UPDATE SET value = excluded.value
                        """,
                        logger: self.logger
                    )
                }
                try await FleetSignals.send(.settings, on: connection, logger: self.logger)
            }
        }
    }

    func text(_ name: String) async throws -> String? {
        try await Postgres.run("read the settings") {
            var found: String?
            for try await value in try await client.query(
                "SELECT value FROM haul_text_setting WHERE name = \(name)",
                logger: logger
            ).decode(String.self) {
                found = value
            }
            return found
        }
    }

    func saveText(_ name: String, _ value: String) async throws {
        try await Postgres.run("save the settings") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                _ = try await connection.checkedQuery(
                    """
                    INSERT INTO haul_text_setting (name, value) VALUES (\(name), \(value))
                    ON CONFLICT (name) DO UPDATE SET value = excluded.value
                    """,
                    logger: self.logger
                )
                try await FleetSignals.send(.settings, on: connection, logger: self.logger)
            }
        }
    }
}
