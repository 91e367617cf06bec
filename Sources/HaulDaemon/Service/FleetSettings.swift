import Foundation
import Haul
import HaulWire

/// `haul set` and `/v1/settings` in a fleet: each node has its own capacity — downloads at
/// once, downloads per host, connections per host, its rate limit (its link) — and the
/// fleet may add caps over all nodes together; the other settings (how long to keep trying,
/// metered networks, the lowest speed) hold for every node.
struct FleetSettings {
    let fleet: any FleetView

    /// A node's limits when it was never given any: a daemon's defaults.
    static let defaults = StoredLimits(
        maxConcurrentDownloads: DaemonSettings.defaultMaxConcurrent,
        maxDownloadsPerHost: DaemonSettings.defaultMaxPerHost,
        maxConnectionsPerHost: DaemonSettings.defaultMaxConnectionsPerHost,
        overallRateLimit: 0
    )

    /// Checks the caps: downloads 0 (none) to 100,000, a rate of 0 (none) or a valid one.
    /// - Throws: ``HaulError/Code/invalidArgument`` naming the first bad field.
    static func validate(_ caps: API.FleetCaps) throws {
        for (name, value) in [
            ("fleet.maxConcurrentDownloads", caps.maxConcurrentDownloads),
            ("fleet.maxDownloadsPerHost", caps.maxDownloadsPerHost),
        ] {
            guard let value, !(0...100_000).contains(value) else { continue }
            throw HaulError(.invalidArgument, "\(name) must be from 0 (no cap) to 100000, not \(value)")
        }
        if let rate = caps.overallRateLimit, rate != 0 {
            do {
                try DownloadRequest.validateRateLimit(rate)
            } catch var error as HaulError {
                error.message = "fleet.overallRateLimit: \(error.message) (0 for none)"
                throw error
            }
        }
    }

    /// Checks that `node` is one of the fleet's and that `change` holds only a node's own
    /// limits (nothing is saved otherwise).
    /// - Throws: ``HaulError/Code/notFound`` for an unknown node;
    ///   ``HaulError/Code/invalidArgument`` for a setting that holds for the whole fleet.
    func validate(_ change: StoredLimits, meteredInterfaces: [String]?, for node: String) async throws {
        let fleetWide = change.fleetFields + (meteredInterfaces == nil ? [] : ["meteredInterfaces"])
        if let field = fleetWide.first {
            throw HaulError(
                .invalidArgument,
                "\(field) holds for the whole fleet, not for one node",
                hint: "Set it without a node (haul set without --node)"
            )
        }
        try change.validate()
        let nodes = try await fleet.fleetNodes().map(\.name)
        guard nodes.contains(node) else {
            throw HaulError(
                .notFound,
                "No node '\(node.prefix(80))' in this fleet",
                hint:
                    "Its nodes: \(nodes.isEmpty ? "none yet" : nodes.joined(separator: ", ")) (haul status lists them)"
            )
        }
    }

    /// `own` (this node's settings) as another node, `node`, has them: its own limits as
    /// saved (the defaults where none are), the fleet's settings as they are.
    func settings(of node: String, over own: API.Settings) async throws -> API.Settings {
        let limits = Self.defaults.merging(try await fleet.nodeLimits(of: node))
        var settings = own
        settings.node = node
        settings.maxConcurrentDownloads = limits.maxConcurrentDownloads
        settings.maxDownloadsPerHost = limits.maxDownloadsPerHost
        settings.maxConnectionsPerHost = limits.maxConnectionsPerHost
        settings.overallRateLimit = limits.overallRateLimit
        return settings
    }
}
