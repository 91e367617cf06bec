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
    /// With a shared queue that caps the rate of every manager together, the lower of this
    /// and this manager's part of that cap holds.
    public func setOverallRateLimit(_ bytesPerSecond: Int64?) throws {
        try DownloadRequest.validateRateLimit(bytesPerSecond)
        applyRateLimits { $0.own = bytesPerSecond }
    }

    /// This manager's own limit on all its downloads together; nil for none.
    public nonisolated var overallRateLimit: Int64? { rateLimits.withLock { $0.own } }

    /// The limit the downloads run under now: the own one, or the shared queue's part if lower.
    package nonisolated var effectiveRateLimit: Int64? { downloader.overallRateLimit }

    /// Changes the own limit or the shared part, and applies the lower of the two.
    func applyRateLimits(_ change: (inout (own: Int64?, shared: Int64?)) -> Void) {
        let limit = rateLimits.withLock { limits in
            change(&limits)
            return [limits.own, limits.shared].compactMap { $0 }.min()
        }
        downloader.setOverallRateLimit(limit)
    }

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

    /// Changes the URLs a task is fetched from, as aria2's `changeUri` does: removes each of
    /// `removing` once (the first source equal to it), then inserts `adding` at `position`
    /// (0 first; nil or past the end, last). The first source is the task's URL, the others
    /// its mirrors; a source kept keeps what Haul learnt of it. A running task stops at a
    /// checkpoint and continues with the new sources from there (a new source's bytes are
    /// checked against the file's before they are kept, as a mirror's always are); a waiting
    /// one uses them when it starts.
    /// - Returns: how many were removed and added.
    /// - Throws: ``HaulError/Code/invalidArgument`` for a finished task, an invalid URL, no
    ///   source left, a source named twice or more than 16; nothing changes then.
    public func changeSources(
        of id: UUID,
        removing: [URL],
        adding: [URL],
        at position: Int? = nil
    ) async throws -> (removed: Int, added: Int) {
        try await inTurn(id) {
            await refreshFromSharedStore(id)
            let state = try currentState(id)
            guard state != .completed, state != .cancelled, let record = try await store.task(id: id) else {
                throw HaulError(.invalidArgument, "Task \(id.shown) is \(state.rawValue): its sources no longer change")
            }
            var sources = record.sources.isEmpty ? [DownloadSource(url: record.url)] : record.sources
            var removed = 0
            for url in removing {
                guard let index = sources.firstIndex(where: { $0.url == url }) else { continue }
                sources.remove(at: index)
                removed += 1
            }
            let index = min(max(0, position ?? sources.count), sources.count)
            sources.insert(contentsOf: adding.map { DownloadSource(url: $0) }, at: index)
            guard let first = sources.first else {
                throw HaulError(
                    .invalidArgument,
                    "Task \(id.shown) would have no URL left",
                    hint: "Add one as you remove the last"
                )
            }
            try DownloadSource.validate(sources)
            guard Set(sources.map(\.url.absoluteString)).count == sources.count else {
                throw HaulError(.invalidArgument, "A URL would be a source of task \(id.shown) twice")
            }
            if state == .running {
                try await stop(id, .pause)
                // Its run may have finished the file meanwhile: then there is nothing to change.
                let now = try currentState(id)
                guard now == .paused else {
                    throw HaulError(
                        .invalidArgument,
                        "Task \(id.shown) is \(now.rawValue): its sources no longer change"
                    )
                }
            }
            do {
                try await store.setSources(id, url: first.url, sources: sources.count > 1 ? sources : [])
            } catch {
                // Not half done: a run stopped for the change goes on with the sources it had.
                if state == .running { _ = try? await resumeInTurn(id, priority: nil) }
                throw error
            }
            let host = DownloadManager.hostKey(first.url)
            machine.changeEntry(id) { $0.host = host }
            if state == .running { _ = try await resumeInTurn(id, priority: nil) }
            return (removed, adding.count)
        }
    }
}
