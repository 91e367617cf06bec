import Foundation

// MARK: - Waiting for the network

extension DownloadManager {
    /// Whether `host` has no usable route now: no route at all, or one over an interface
    /// that is down or has no carrier. Always false for a manager that does not watch the network.
    nonisolated func isOffline(host: String) -> Bool {
        guard watchesNetwork else { return false }
        guard let route = NetworkMonitor.route(to: host) else { return true }
        return !route.isUsable
    }

    /// The host of a task, as its scheduler entry names it (`host:port`).
    func host(of id: UUID) -> String? {
        guard let key = known[id]?.entry?.host, let colon = key.lastIndex(of: ":") else { return nil }
        return String(key[..<colon])
    }

    /// Watches the network until shutdown: each change looks at the running tasks (a route
    /// gone stops them, to wait) and the waiting ones (a route back queues them).
    nonisolated func watchNetworkUntilShutdown() async {
        guard watchesNetwork else { return }
        let monitor: NetworkMonitor
        do {
            monitor = try NetworkMonitor()
        } catch {
            logger.warning("not watching the network", metadata: ["error": "\(error)"])
            return
        }
        await withTaskCancellationHandler {
            for await _ in monitor.changes() {
                guard await networkChanged() else { break }
            }
        } onCancel: {
            monitor.stop()
        }
        monitor.stop()
    }

    /// Acts on a change of the network; false once shutting down.
    func networkChanged() async -> Bool {
        guard !shuttingDown else { return false }
        for id in running {
            guard let host = host(of: id), isOffline(host: host) else { continue }
            logger.notice("no route to the server: waiting for the network", metadata: ["haul.task": "\(id)"])
            known[id]?.offlinePending = true
            known[id]?.transfer?.control.request(.yield)
        }
        for (id, task) in known where task.state == .waitingForNetwork {
            guard let host = host(of: id), !isOffline(host: host) else { continue }
            await comeOnline(id)
        }
        return true
    }

    /// After a run stopped because its route went, or failed for want of one: the task waits
    /// for the network (keeping its data, spending no retries). True when it did.
    func goOffline(_ id: UUID, after error: HaulError?) async -> Bool {
        guard watchesNetwork, !shuttingDown, running.contains(id), let host = host(of: id) else { return false }
        let stoppedForRoute = known[id]?.offlinePending == true
        if !stoppedForRoute {
            // A failure: only one the network explains, when it is still missing.
            guard let error, error.isRetryable || error.network?.isNoRoute == true, isOffline(host: host) else {
                return false
            }
        }
        known[id]?.offlinePending = false
        do {
            try await store.setState(id, .waitingForNetwork, error: error?.description)
        } catch {
            return false
        }
        running.remove(id)
        let run = known[id]?.run
        known[id]?.run = nil
        scheduler.remove(id)
        move(id, .offline)
        for waiter in run?.endWaiters ?? [] { waiter.resume() }
        // The route may have come back while the run stopped.
        if !isOffline(host: host) {
            await comeOnline(id)
        } else if let limit = networkWaitLimit {
            known[id]?.retryTimer?.cancel()
            known[id]?.retryTimer = Task { [weak self] in
                try? await Task.sleep(for: limit)
                guard !Task.isCancelled else { return }
                await self?.networkWaitExpired(id, host: host, limit: limit)
            }
        }
        admitAndStart()
        return true
    }

    /// A task waited for the network as long as allowed: it fails, saying so.
    func networkWaitExpired(_ id: UUID, host: String, limit: Duration) async {
        guard known[id]?.state == .waitingForNetwork, !shuttingDown else { return }
        known[id]?.retryTimer = nil
        let error = HaulError(
            .connection,
            "No usable route to \(host) for \(limit.spoken): the network did not come back",
            hint:
                "Check the network connection, then run the same command again to resume (--wait-for-network waits longer)"
        )
        do {
            try await store.setState(id, .failed, error: error.description)
        } catch {
            return
        }
        guard known[id]?.state == .waitingForNetwork else { return }
        move(id, .giveUp)
        hub.publish(.failed(id: id, error: error))
    }

    /// A waiting task's route is back: it queues in its old place.
    func comeOnline(_ id: UUID) async {
        guard known[id]?.state == .waitingForNetwork, !shuttingDown else { return }
        disarmRetry(id)
        do {
            try await store.setState(id, .queued)
        } catch {
            return  // The next change, or a resume, tries again.
        }
        guard known[id]?.state == .waitingForNetwork else { return }
        logger.notice("the network is back", metadata: ["haul.task": "\(id)"])
        move(id, .online)
        if let entry = known[id]?.entry { scheduler.enqueue(entry) }
        admitAndStart()
    }
}
