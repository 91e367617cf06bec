import Foundation
import Haul
import Logging

/// What a daemon's manager starts with: its command line and configuration over the
/// settings its store kept.
enum DaemonSettings {
    /// A daemon's own limits when none were given or kept (in a fleet, a node's too).
    static let (defaultMaxConcurrent, defaultMaxPerHost, defaultMaxConnectionsPerHost) = (3, 8, 16)

    /// The configuration of the daemon's manager on `store`, with the limits to start with
    /// (``startingLimits(_:store:logger:)``, saved for the next start).
    static func manager(
        for configuration: DaemonService.Configuration,
        store: any TaskStore
    ) async throws -> DownloadManager.Configuration {
        let logger = configuration.logger
        let limits = try await startingLimits(configuration, store: store, logger: logger)
        var managerConfiguration = DownloadManager.Configuration(
            store: .engine(store),
            maxConcurrentDownloads: limits.maxConcurrentDownloads ?? defaultMaxConcurrent,
            maxDownloadsPerHost: limits.maxDownloadsPerHost ?? defaultMaxPerHost,
            recoversTasks: true,
            background: true
        )
        managerConfiguration.maxConnectionsPerHost = limits.maxConnectionsPerHost ?? defaultMaxConnectionsPerHost
        managerConfiguration.sharedQueue = configuration.sharedStore
        var keepsTrying = configuration.keepsTrying
        if let seconds = limits.giveUpAfter { keepsTrying.giveUpAfter = .seconds(seconds) }
        managerConfiguration.keepsTrying = keepsTrying
        managerConfiguration.watchesNetwork = true
        if let allow = limits.allowMetered { managerConfiguration.networkPolicy.allowsMetered = allow == 1 }
        if let patterns = try await store.storedMeteredInterfaces() {
            managerConfiguration.networkPolicy.meteredInterfaces = patterns
        }
        if let retries = configuration.retriesPerRun { managerConfiguration.downloader.retry.maxRetries = retries }
        managerConfiguration.downloader.logger = logger
        managerConfiguration.downloader.overallRateLimit = limits.overallRateLimit.flatMap { $0 > 0 ? $0 : nil }
        if let interval = configuration.checkpointInterval {
            managerConfiguration.downloader.checkpointInterval = interval
        }
        if let timeout = configuration.connectTimeout { managerConfiguration.downloader.connectTimeout = timeout }
        if let timeout = configuration.readTimeout { managerConfiguration.downloader.readTimeout = timeout }
        managerConfiguration.downloader.lowestSpeed = limits.lowestSpeed
        if let wait = configuration.maxRetryAfter { managerConfiguration.downloader.retry.maxRetryAfter = wait }
        managerConfiguration.downloader.setsRemoteTime = configuration.setsRemoteTime
        managerConfiguration.downloader.setsOriginAttribute = configuration.setsOriginAttribute
        managerConfiguration.hooks = configuration.hooks
        managerConfiguration.networkWaitLimit = configuration.networkWaitLimit
        return managerConfiguration
    }

    /// The limits to start with: those given in the configuration over those the store kept
    /// (which are saved, so the next start keeps them too). A kept value out of range is
    /// named in the log and ignored.
    static func startingLimits(
        _ configuration: DaemonService.Configuration,
        store: any TaskStore,
        logger: Logger
    ) async throws
        -> StoredLimits
    {
        let given = StoredLimits(
            maxConcurrentDownloads: configuration.maxConcurrentDownloads,
            maxDownloadsPerHost: configuration.maxDownloadsPerHost,
            maxConnectionsPerHost: configuration.maxConnectionsPerHost,
            overallRateLimit: configuration.overallRateLimit,
            lowestSpeedLimit: configuration.lowestSpeed?.bytesPerSecond,
            lowestSpeedTime: configuration.lowestSpeed?.time.components.seconds
        )
        try given.validate()
        let (kept, rejected) = try await store.storedLimits()
        for setting in rejected {
            logger.warning(
                "ignoring a setting kept in the store that is out of range",
                metadata: ["setting": "\(setting)"]
            )
        }
        if given != StoredLimits() { try await store.saveLimits(given) }
        return kept.merging(given)
    }

    /// Applies the fields of `change` that are set to the running manager.
    static func apply(
        _ change: StoredLimits,
        meteredInterfaces: [String]?,
        to manager: DownloadManager
    ) async throws {
        if change.allowMetered != nil || meteredInterfaces != nil {
            var policy = await manager.networkPolicy
            if let allow = change.allowMetered { policy.allowsMetered = allow == 1 }
            if let meteredInterfaces { policy.meteredInterfaces = meteredInterfaces }
            if policy != (await manager.networkPolicy) { try await manager.setNetworkPolicy(policy) }
        }
        if let limit = change.maxConcurrentDownloads { try await manager.setMaxConcurrentDownloads(limit) }
        if let limit = change.maxDownloadsPerHost { try await manager.setMaxDownloadsPerHost(limit) }
        if let limit = change.maxConnectionsPerHost { try await manager.setMaxConnectionsPerHost(limit) }
        if let rate = change.overallRateLimit { try await manager.setOverallRateLimit(rate == 0 ? nil : rate) }
        if let seconds = change.giveUpAfter { try await manager.setGiveUpAfter(.seconds(seconds)) }
        if change.lowestSpeedLimit != nil || change.lowestSpeedTime != nil {
            // Either half over what holds now (the time alone keeps the limit, and the reverse).
            let now = manager.lowestSpeed
            let floor = StoredLimits(
                lowestSpeedLimit: change.lowestSpeedLimit ?? now?.bytesPerSecond ?? 0,
                lowestSpeedTime: change.lowestSpeedTime ?? now?.time.components.seconds
            )
            manager.setLowestSpeed(floor.lowestSpeed)
        }
    }
}
