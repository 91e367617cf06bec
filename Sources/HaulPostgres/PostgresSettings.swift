import Foundation
import Haul
import HaulWire
import Logging
import PostgresNIO

/// The fleet's settings in PostgreSQL: the fleet's own (`haul_setting`, `haul_text_setting`:
/// its caps over all nodes, how long to keep trying, the metered networks) and each node's
/// capacity (`haul_node_setting`: its downloads, connections and link, ``StoredLimits/nodeNames``).
/// A change is signalled to the other nodes in its own transaction (``FleetSignals``), so
/// each reads it at once.
struct PostgresSettings {
    let client: PostgresClient
    let logger: Logger
    /// This node: its own limits are read and written under its name.
    let node: String

    /// The fleet's caps, by their stored names (in `haul_setting`).
    enum Cap: String, CaseIterable {
        case maxConcurrentDownloads = "fleetMaxConcurrentDownloads"
        case maxDownloadsPerHost = "fleetMaxDownloadsPerHost"
        case overallRateLimit = "fleetRateLimit"
    }

    /// This node's settings: the fleet's, with this node's own limits.
    func numeric() async throws -> [(name: String, value: Int64?)] {
        try await Postgres.run("read the settings") {
            var settings: [(name: String, value: Int64?)] = []
            for try await (name, value) in try await client.query(
                """
                SELECT name, value FROM haul_setting WHERE name <> ALL(\(Array(StoredLimits.nodeNames)))
                UNION ALL
                SELECT name, value FROM haul_node_setting WHERE node = \(node)
                """,
                logger: logger
            ).decode((String, Int64?).self) {
                settings.append((name, value))
            }
            return settings
        }
    }

    /// Saves settings through this node: its own limits under its name, the rest for the fleet.
    func saveNumeric(_ values: [(name: String, value: Int64)]) async throws {
        try await save(values, of: node, caps: nil)
    }

    /// Node `node`'s own limits as saved (none for a node never given any).
    func numeric(of node: String) async throws -> [(name: String, value: Int64?)] {
        try await Postgres.run("read the node's limits") {
            var settings: [(name: String, value: Int64?)] = []
            for try await (name, value) in try await client.query(
                "SELECT name, value FROM haul_node_setting WHERE node = \(node)",
                logger: logger
            ).decode((String, Int64?).self) {
                settings.append((name, value))
            }
            return settings
        }
    }

    /// The fleet's caps over all its nodes (a field absent: none).
    func caps() async throws -> API.FleetCaps {
        var caps = API.FleetCaps()
        try await Postgres.run("read the fleet's caps") {
            for try await (name, value) in try await client.query(
                "SELECT name, value FROM haul_setting WHERE name = ANY(\(Cap.allCases.map(\.rawValue)))",
                logger: logger
            ).decode((String, Int64).self) where value > 0 {
                switch Cap(rawValue: name) {
                case .maxConcurrentDownloads: caps.maxConcurrentDownloads = Int(clamping: value)
                case .maxDownloadsPerHost: caps.maxDownloadsPerHost = Int(clamping: value)
                case .overallRateLimit: caps.overallRateLimit = value
                case nil: break
                }
            }
        }
        return caps
    }

    /// Saves, in one transaction, `values` — node `node`'s own limits under its name (those
    /// of ``StoredLimits/nodeNames``), the others for the fleet — and the caps set in `caps`
    /// (0: none), and signals the change: all of it lands, or none.
    func save(_ values: [(name: String, value: Int64)], of node: String, caps: API.FleetCaps?) async throws {
        let capValues: [(Cap, Int64?)] = [
            (.maxConcurrentDownloads, caps?.maxConcurrentDownloads.map(Int64.init)),
            (.maxDownloadsPerHost, caps?.maxDownloadsPerHost.map(Int64.init)),
            (.overallRateLimit, caps?.overallRateLimit),
        ]
        let fleet =
            values.filter { !StoredLimits.nodeNames.contains($0.name) }
            + capValues.compactMap { cap, value in value.map { (cap.rawValue, $0) } }
        let own = values.filter { StoredLimits.nodeNames.contains($0.name) }
        try await Postgres.run("save the settings") {
            try await client.withCheckedTransaction(logger: logger) { connection in
                for (name, value) in fleet {
                    _ = try await connection.checkedQuery(
                        """
                        INSERT INTO haul_setting (name, value) VALUES (\(name), \(value))
                        ON CONFLICT (name) DO UPDATE SET value = excluded.value
                        """,
                        logger: self.logger
                    )
                }
                for (name, value) in own {
                    _ = try await connection.checkedQuery(
                        """
                        INSERT INTO haul_node_setting (node, name, value) VALUES (\(node), \(name), \(value))
                        ON CONFLICT (node, name) DO UPDATE SET value = excluded.value
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
