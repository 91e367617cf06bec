import Foundation
import GRDB

/// The daemon's limits as last changed (`PUT /v1/settings`, `haul set`, or a flag given to
/// `haul daemon`), kept in the store so a restart keeps them. A nil field was never set.
package struct StoredLimits: Sendable, Equatable {
    package var maxConcurrentDownloads: Int?
    package var maxConnectionsPerHost: Int?
    /// Bytes per second over all downloads together; 0 for none.
    package var overallRateLimit: Int64?
    /// Seconds a task keeps trying after failures that may pass (1 to 366 days' worth).
    package var giveUpAfter: Int64?
    /// Whether downloads may use metered networks: 1 yes, 0 no.
    package var allowMetered: Int64?

    package init(
        maxConcurrentDownloads: Int? = nil,
        maxConnectionsPerHost: Int? = nil,
        overallRateLimit: Int64? = nil,
        giveUpAfter: Int64? = nil,
        allowMetered: Int64? = nil
    ) {
        self.allowMetered = allowMetered
        self.maxConcurrentDownloads = maxConcurrentDownloads
        self.maxConnectionsPerHost = maxConnectionsPerHost
        self.overallRateLimit = overallRateLimit
        self.giveUpAfter = giveUpAfter
    }

    /// The fields of `newer` that are set, over these.
    package func merging(_ newer: StoredLimits) -> StoredLimits {
        StoredLimits(
            maxConcurrentDownloads: newer.maxConcurrentDownloads ?? maxConcurrentDownloads,
            maxConnectionsPerHost: newer.maxConnectionsPerHost ?? maxConnectionsPerHost,
            overallRateLimit: newer.overallRateLimit ?? overallRateLimit,
            giveUpAfter: newer.giveUpAfter ?? giveUpAfter,
            allowMetered: newer.allowMetered ?? allowMetered
        )
    }

    /// Checks every field; the first that is out of range throws, naming it.
    /// - Throws: ``HaulError/Code/invalidArgument``.
    package func validate() throws {
        if let limit = maxConcurrentDownloads { try DownloadManager.validateLimit(limit, "maxConcurrentDownloads") }
        if let limit = maxConnectionsPerHost { try DownloadManager.validateLimit(limit, "maxConnectionsPerHost") }
        if let rate = overallRateLimit, rate != 0 {
            do {
                try DownloadRequest.validateRateLimit(rate)
            } catch var error as HaulError {
                error.message = "overallRateLimit: \(error.message) (0 for none)"
                throw error
            }
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

extension Store {
    private enum SettingName: String, CaseIterable {
        case maxConcurrentDownloads, maxConnectionsPerHost, overallRateLimit, giveUpAfter, allowMetered
    }

    /// The limits saved by ``saveLimits(_:)``. A stored value that is out of range (the file
    /// was edited, or written by a broken version) is left out and named in `rejected`, so
    /// the caller can say so and use its default.
    package func storedLimits() async throws -> (limits: StoredLimits, rejected: [String]) {
        let rows = try await read { db in
            try Row.fetchAll(db, sql: "SELECT name, value FROM setting").map { row -> (String, Int64?) in
                (row["name"], row["value"])
            }
        }
        var limits = StoredLimits()
        var rejected: [String] = []
        for (name, value) in rows {
            guard let setting = SettingName(rawValue: name), let value else { continue }
            var one = StoredLimits()
            switch setting {
            case .maxConcurrentDownloads: one.maxConcurrentDownloads = Int(exactly: value)
            case .maxConnectionsPerHost: one.maxConnectionsPerHost = Int(exactly: value)
            case .overallRateLimit: one.overallRateLimit = value
            case .giveUpAfter: one.giveUpAfter = value
            case .allowMetered: one.allowMetered = value
            }
            if one == StoredLimits() || (try? one.validate()) == nil {
                rejected.append("\(name) = \(value)")
            } else {
                limits = limits.merging(one)
            }
        }
        return (limits, rejected)
    }

    /// Saves the fields of `limits` that are set, together (one transaction).
    package func saveLimits(_ limits: StoredLimits) async throws {
        let values: [(SettingName, Int64?)] = [
            (.maxConcurrentDownloads, limits.maxConcurrentDownloads.map(Int64.init)),
            (.maxConnectionsPerHost, limits.maxConnectionsPerHost.map(Int64.init)),
            (.overallRateLimit, limits.overallRateLimit),
            (.giveUpAfter, limits.giveUpAfter),
            (.allowMetered, limits.allowMetered),
        ]
        try await write { db in
            for case let (name, value?) in values {
                try db.execute(
                    sql:
                        "INSERT INTO setting (name, value) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET value = excluded.value",
                    arguments: [name.rawValue, value]
                )
            }
        }
    }

    /// The metered interface patterns last saved, or nil (the defaults); a stored value
    /// that is not a valid list is ignored (nil).
    package func storedMeteredInterfaces() async throws -> [String]? {
        let text = try await read { db in
            try String.fetchOne(db, sql: "SELECT value FROM textSetting WHERE name = 'meteredInterfaces'")
        }
        guard let text, let list = try? JSONDecoder().decode([String].self, from: Data(text.utf8)),
            (try? NetworkPolicy(meteredInterfaces: list).validate()) != nil
        else { return nil }
        return list
    }

    /// Saves the metered interface patterns.
    package func saveMeteredInterfaces(_ patterns: [String]) async throws {
        let text = String(decoding: try JSONEncoder().encode(patterns), as: UTF8.self)
        try await write { db in
            try db.execute(
                sql: """
                    INSERT INTO textSetting (name, value) VALUES ('meteredInterfaces', ?)
                    ON CONFLICT(name) DO UPDATE SET value = excluded.value
                    """,
                arguments: [text]
            )
        }
    }
}
