import Foundation

// MARK: - Limits

extension DownloadManager {
    /// Changes how many downloads run at once. Lowering it sends the most recently started
    /// back to waiting (keeping their data and their place); raising it starts the oldest waiting.
    public func setMaxConcurrentDownloads(_ limit: Int) throws {
        try DownloadManager.validateLimit(limit, "maxConcurrentDownloads")
        perform(machine.setMaxConcurrent(limit))
        admitAndStart()
    }

    /// Changes how many downloads run at once against one host, like ``setMaxConcurrentDownloads(_:)``.
    public func setMaxDownloadsPerHost(_ limit: Int) throws {
        try DownloadManager.validateLimit(limit, "maxDownloadsPerHost")
        perform(machine.setPerHostLimit(limit))
        admitAndStart()
    }

    /// Changes how many connections the downloads to one host hold at once, together: at
    /// once for new connections; lowered, the widest downloads give connections back at
    /// their next segment boundaries.
    public func setMaxConnectionsPerHost(_ limit: Int) throws {
        try DownloadManager.validateLimit(limit, "maxConnectionsPerHost")
        hostConnections.setCap(limit)
    }

    /// Changes the rate limit of tasks (bytes per second; nil for none): recorded for their
    /// next runs and applied at once to those running.
    /// - Throws: ``HaulError/Code/invalidArgument`` for an unknown task or a rate below 1.
    public func setRateLimit(_ bytesPerSecond: Int64?, for ids: [UUID]) async throws {
        try DownloadRequest.validateRateLimit(bytesPerSecond)
        for id in ids where machine[id] == nil {
            throw HaulError(.notFound, "No task \(id.shown)")
        }
        try await store.setRateLimit(bytesPerSecond, for: ids)
        for id in ids { runs[id]?.handles.limiter.setRate(bytesPerSecond) }
    }

    /// Changes the limit on all downloads together (bytes per second; nil for none), at once.
    public func setOverallRateLimit(_ bytesPerSecond: Int64?) throws {
        try DownloadRequest.validateRateLimit(bytesPerSecond)
        downloader.setOverallRateLimit(bytesPerSecond)
    }

    /// The limit on all downloads together now; nil for none.
    public nonisolated var overallRateLimit: Int64? { downloader.overallRateLimit }

    /// Changes the speed each connection must keep (``LowestSpeed``; nil for none), for the
    /// runs that start from now on.
    public nonisolated func setLowestSpeed(_ floor: LowestSpeed?) {
        downloader.setLowestSpeed(floor)
    }

    /// The speed each connection of a run starting now must keep; nil for none.
    public nonisolated var lowestSpeed: LowestSpeed? { downloader.lowestSpeed }

    /// The limits in force.
    public var limits: (maxConcurrentDownloads: Int, maxDownloadsPerHost: Int, maxConnectionsPerHost: Int) {
        (machine.maxConcurrent, machine.perHostLimit, hostConnections.cap)
    }
}
