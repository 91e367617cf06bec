import Foundation
import GRDB

/// The daemon's limits as last changed (`PUT /v1/settings`, `haul set`, or a flag given to
/// `haul daemon`), kept in the store so a restart keeps them. A nil field was never set.
package struct StoredLimits: Sendable, Equatable {
    package var maxConcurrentDownloads: Int?
    package var maxDownloadsPerHost: Int?
    /// Connections at once to one host, over all its downloads.
    package var maxConnectionsPerHost: Int?
    /// Bytes per second over all downloads together; 0 for none.
    package var overallRateLimit: Int64?
    /// Seconds a task keeps trying after failures that may pass (1 to 366 days' worth).
    package var giveUpAfter: Int64?
    /// Whether downloads may use metered networks: 1 yes, 0 no.
    package var allowMetered: Int64?
    /// The speed a connection must keep, bytes per second; 0 for none (``LowestSpeed``).
    package var lowestSpeedLimit: Int64?
    /// Seconds a connection may stay under it (1 to 86400).
    package var lowestSpeedTime: Int64?

    package init(
        maxConcurrentDownloads: Int? = nil,
        maxDownloadsPerHost: Int? = nil,
        maxConnectionsPerHost: Int? = nil,
        overallRateLimit: Int64? = nil,
        giveUpAfter: Int64? = nil,
        allowMetered: Int64? = nil,
        lowestSpeedLimit: Int64? = nil,
        lowestSpeedTime: Int64? = nil
    ) {
        self.allowMetered = allowMetered
        self.lowestSpeedLimit = lowestSpeedLimit
        self.lowestSpeedTime = lowestSpeedTime
        self.maxConcurrentDownloads = maxConcurrentDownloads
        self.maxDownloadsPerHost = maxDownloadsPerHost
        self.maxConnectionsPerHost = maxConnectionsPerHost
        self.overallRateLimit = overallRateLimit
        self.giveUpAfter = giveUpAfter
    }

    /// The fields of `newer` that are set, over these.
    package func merging(_ newer: StoredLimits) -> StoredLimits {
        StoredLimits(
            maxConcurrentDownloads: newer.maxConcurrentDownloads ?? maxConcurrentDownloads,
            maxDownloadsPerHost: newer.maxDownloadsPerHost ?? maxDownloadsPerHost,
            maxConnectionsPerHost: newer.maxConnectionsPerHost ?? maxConnectionsPerHost,
            overallRateLimit: newer.overallRateLimit ?? overallRateLimit,
            giveUpAfter: newer.giveUpAfter ?? giveUpAfter,
            allowMetered: newer.allowMetered ?? allowMetered,
            lowestSpeedLimit: newer.lowestSpeedLimit ?? lowestSpeedLimit,
            lowestSpeedTime: newer.lowestSpeedTime ?? lowestSpeedTime
        )
    }

    /// Checks every field; the first that is out of range throws, naming it.
    /// - Throws: ``HaulError/Code/invalidArgument``.
    package func validate() throws {
        if let limit = maxConcurrentDownloads { try DownloadManager.validateLimit(limit, "maxConcurrentDownloads") }
        if let limit = maxDownloadsPerHost { try DownloadManager.validateLimit(limit, "maxDownloadsPerHost") }
        if let limit = maxConnectionsPerHost { try DownloadManager.validateLimit(limit, "maxConnectionsPerHost") }
        if let rate = overallRateLimit, rate != 0 {
            do {
                try DownloadRequest.validateRateLimit(rate)
            } catch var error as HaulError {
                error.message = "overallRateLimit: \(error.message) (0 for none)"
                throw error
            }
        }
        if let limit = lowestSpeedLimit, !(0...(1 << 40)).contains(limit) {
            throw HaulError(
                .invalidArgument,
                "lowestSpeedLimit must be from 0 (none) to \(Int64(1) << 40) bytes per second, not \(limit)"
            )
        }
        if let seconds = lowestSpeedTime, !(1...86400).contains(seconds) {
            throw HaulError(.invalidArgument, "lowestSpeedTime must be from 1 to 86400 seconds, not \(seconds)")
        }
        if let allowMetered, allowMetered != 0, allowMetered != 1 {
            throw HaulError(.invalidArgument, "allowMetered must be 0 or 1, not \(allowMetered)")
        }
        if let seconds = giveUpAfter, !(1...KeepTrying.longestGiveUp.components.seconds).contains(seconds) {
            throw HaulError(
                .invalidArgument,
                "giveUpAfter must be from 1 to \(KeepTrying.longestGiveUp.components.seconds) seconds, not \(seconds)"
            )
        }
    }
}

extension StoredLimits {
    /// The names of the settings the limits are saved under.
    enum Name: String, CaseIterable {
        case maxConcurrentDownloads, overallRateLimit, giveUpAfter, allowMetered
        case lowestSpeedLimit, lowestSpeedTime
        /// Kept under its old name: stores written before the limit had its own name
        /// for connections keep their value.
        case maxDownloadsPerHost = "maxConnectionsPerHost"
        case maxConnectionsPerHost = "hostConnections"
    }

    /// The limits that, in a fleet, are each node's own — its capacity: its downloads, its
    /// connections, its link — by their stored names. The others hold for the whole fleet.
    package static let nodeNames: Set<String> = Set(
        [Name.maxConcurrentDownloads, .maxDownloadsPerHost, .maxConnectionsPerHost, .overallRateLimit].map(\.rawValue)
    )

    /// The fields set here that hold for a whole fleet, not for one node, by their API names.
    package var fleetFields: [String] {
        [
            ("giveUpAfter", giveUpAfter), ("allowMetered", allowMetered),
            ("lowestSpeedLimit", lowestSpeedLimit), ("lowestSpeedTime", lowestSpeedTime),
        ].compactMap { $0.1 == nil ? nil : $0.0 }
    }

    /// The limits among stored `settings` (by their stored names; others are passed over).
    /// A value that is out of range (edited, or written by a broken version) is left out and
    /// named in `rejected`, so the caller can say so and use its default.
    package static func reading(
        _ settings: [(name: String, value: Int64?)]
    ) -> (limits: StoredLimits, rejected: [String]) {
        var limits = StoredLimits()
        var rejected: [String] = []
        for (name, value) in settings {
            guard let setting = Name(rawValue: name), let value else { continue }
            var one = StoredLimits()
            switch setting {
            case .maxConcurrentDownloads: one.maxConcurrentDownloads = Int(exactly: value)
            case .maxDownloadsPerHost: one.maxDownloadsPerHost = Int(exactly: value)
            case .maxConnectionsPerHost: one.maxConnectionsPerHost = Int(exactly: value)
            case .overallRateLimit: one.overallRateLimit = value
            case .giveUpAfter: one.giveUpAfter = value
            case .allowMetered: one.allowMetered = value
            case .lowestSpeedLimit: one.lowestSpeedLimit = value
            case .lowestSpeedTime: one.lowestSpeedTime = value
            }
            if one == StoredLimits() || (try? one.validate()) == nil {
                rejected.append("\(name) = \(value)")
            } else {
                limits = limits.merging(one)
            }
        }
        return (limits, rejected)
    }

    /// The fields that are set, by their stored names.
    package var storedValues: [(name: String, value: Int64)] {
        let values: [(Name, Int64?)] = [
            (.maxConcurrentDownloads, maxConcurrentDownloads.map(Int64.init)),
            (.maxDownloadsPerHost, maxDownloadsPerHost.map(Int64.init)),
            (.maxConnectionsPerHost, maxConnectionsPerHost.map(Int64.init)),
            (.overallRateLimit, overallRateLimit),
            (.giveUpAfter, giveUpAfter),
            (.allowMetered, allowMetered),
            (.lowestSpeedLimit, lowestSpeedLimit),
            (.lowestSpeedTime, lowestSpeedTime),
        ]
        return values.compactMap { name, value in value.map { (name.rawValue, $0) } }
    }

    /// The speed floor these limits set: nil when none (no limit, or 0); the time defaults
    /// to 30 seconds.
    package var lowestSpeed: LowestSpeed? {
        guard let limit = lowestSpeedLimit, limit > 0 else { return nil }
        return try? LowestSpeed(bytesPerSecond: limit, time: .seconds(lowestSpeedTime ?? 30))
    }
}

extension Store {
    package func numericSettings() async throws -> [(name: String, value: Int64?)] {
        try await read { db in
            try Row.fetchAll(db, sql: "SELECT name, value FROM setting").map { row -> (name: String, value: Int64?) in
                (row["name"], row["value"])
            }
        }
    }

    package func saveNumericSettings(_ values: [(name: String, value: Int64)]) async throws {
        try await write { db in
            for (name, value) in values {
                try db.execute(
                    sql:
                        "INSERT INTO setting (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                    arguments: [name, value]
                )
            }
        }
    }

    package func textSetting(_ name: String) async throws -> String? {
        try await read { db in
            try String.fetchOne(db, sql: "SELECT value FROM textSetting WHERE name = ?", arguments: [name])
        }
    }

    package func saveTextSetting(_ name: String, _ value: String) async throws {
        try await write { db in
            try db.execute(
                sql: """
                    INSERT INTO textSetting (name, value) VALUES (?, ?)
                    ON CONFLICT(name) DO UPDATE SET value = excluded.value
                    """,
                arguments: [name, value]
            )
        }
    }
}
