import Foundation

// MARK: - Waiting for the network

extension DownloadManager {
    /// Why a download to `host` cannot go now: no usable route (none, or over an interface
    /// that is down or has no carrier), or a metered one it may not use. Always nil for a
    /// manager that does not watch the network.
    nonisolated func networkBlock(host: String, allowsMetered: Bool = true) -> NetworkBlock? {
        guard watchesNetwork else { return nil }
        return policy.block(for: NetworkMonitor.route(to: host), allowsMetered: allowsMetered)
    }

    /// ``networkBlock(host:allowsMetered:)`` with the route as known since the network last
    /// changed (``RouteCache``): for a download about to start, not for one that failed.
    nonisolated func networkBlockAtStart(host: String, allowsMetered: Bool) -> NetworkBlock? {
        guard watchesNetwork else { return nil }
        return policy.block(for: routes.route(to: host), allowsMetered: allowsMetered)
    }

    /// ``networkBlock(host:allowsMetered:)`` for a known task; with `routes`, each host's
    /// route is asked of the kernel once per pass over many tasks (thousands of tasks wait on
    /// a few hosts, and each look is a socket and an interface listing).
    func networkBlock(of id: UUID, routes: inout [String: NetworkMonitor.Route?]) -> NetworkBlock? {
        guard watchesNetwork, let host = host(of: id) else { return nil }
        let route: NetworkMonitor.Route?
        if let known = routes[host] {
            route = known
        } else {
            route = NetworkMonitor.route(to: host)
            routes[host] = .some(route)
        }
        return policy.block(for: route, allowsMetered: machine[id]?.entry?.allowsMetered ?? true)
    }

    /// ``networkBlock(host:allowsMetered:)`` for a known task, looked up afresh.
    func networkBlock(of id: UUID) -> NetworkBlock? {
        var routes: [String: NetworkMonitor.Route?] = [:]
        return networkBlock(of: id, routes: &routes)
    }

    /// The policy in force.
    public var networkPolicy: NetworkPolicy { policy.policy }

    /// Changes which networks downloads may use, at once: running downloads whose route
    /// is now forbidden wait for the network; waiting ones now allowed queue again.
    /// - Throws: ``HaulError/Code/invalidArgument`` for a bad interface pattern.
    public func setNetworkPolicy(_ new: NetworkPolicy) async throws {
        try new.validate()
        policy.policy = new
        _ = await networkChanged()
    }

    /// The host of a task, as its scheduler entry names it (`host:port`).
    func host(of id: UUID) -> String? {
        guard let key = machine[id]?.entry?.host, let colon = key.lastIndex(of: ":") else { return nil }
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
        let changes = monitor.changes()
        routes.forget(watching: true)
        await startWatching()
        await withTaskCancellationHandler {
            for await _ in changes {
                routes.forget(watching: true)
                policy.meteredBySystem = monitor.meteredBySystem
                guard await networkChanged() else { break }
            }
        } onCancel: {
            monitor.stop()
        }
        routes.forget(watching: false)
        monitor.stop()
    }

    /// The network as this manager sees it now: the default route, whether it is metered,
    /// and the policy; nil for a manager that does not watch the network.
    public var networkStatus: NetworkStatus? {
        guard watchesNetwork else { return nil }
        return currentNetworkStatus()
    }

    nonisolated func currentNetworkStatus() -> NetworkStatus {
        let route = NetworkMonitor.route(to: NetworkMonitor.defaultRouteProbe)
        return NetworkStatus(
            defaultRoute: route,
            isMetered: route.map { policy.isMetered($0.interface) } ?? false,
            allowsMetered: policy.policy.allowsMetered,
            meteredBySystem: policy.meteredBySystem.sorted()
        )
    }

    /// Notes the network as watching begins: the first ``DownloadEvent/networkChanged(_:)``
    /// is the first change from it.
    private func startWatching() {
        lastNetworkStatus = currentNetworkStatus()
    }

    /// Acts on a change of the network; false once shutting down. A change of what
    /// ``networkStatus`` says is published first, then the tasks move.
    func networkChanged() async -> Bool {
        guard !shuttingDown else { return false }
        let status = currentNetworkStatus()
        if status != lastNetworkStatus {
            lastNetworkStatus = status
            logger.notice(
                "the network changed",
                metadata: [
                    "route": "\(status.defaultRoute?.description ?? "none")", "metered": "\(status.isMetered)",
                ]
            )
            hub.publish(.networkChanged(status))
        }
        var routes: [String: NetworkMonitor.Route?] = [:]
        for id in machine.running {
            guard let block = networkBlock(of: id, routes: &routes) else { continue }
            logger.notice("waiting for the network", metadata: ["haul.task": "\(id)", "reason": "\(block.reason)"])
            perform(machine.routeGone(id))
        }
        for id in machine.knownIDs where machine.state(of: id) == .waitingForNetwork {
            guard networkBlock(of: id, routes: &routes) == nil else { continue }
            await comeOnline(id)
        }
        return true
    }

    /// After a run stopped because its route went, or failed for want of one: the task waits
    /// for the network (keeping its data, spending no retries). True when it did.
    func goOffline(_ id: UUID, after error: HaulError?) async -> Bool {
        guard watchesNetwork, !shuttingDown, machine.isRunning(id), let host = host(of: id) else { return false }
        let stoppedForRoute = machine[id]?.offlinePending == true
        let found = networkBlock(of: id)
        if !stoppedForRoute {
            // A failure: only one the network explains, when it is still missing.
            guard let error, error.isRetryable || error.network?.isNoRoute == true, found != nil else {
                return false
            }
        }
        let block = found ?? .noRoute
        do {
            let why = "Waiting for the network: " + block.reason
            try await store.setState(id, .waitingForNetwork, error: why)
        } catch {
            return false
        }
        leaveRun(id) { $0.leftRun(id, .offline, reason: block.stateChangeReason) }
        // The route may have come back while the run stopped.
        if networkBlock(of: id) == nil {
            await comeOnline(id)
        } else if let limit = networkWaitLimit {
            timers[id]?.cancel()
            let timeline = self.timeline
            timers[id] = Task { [weak self] in
                try? await timeline.sleep(for: limit)
                guard !Task.isCancelled else { return }
                await self?.networkWaitExpired(id, host: host, limit: limit)
            }
        }
        admitAndStart()
        return true
    }

    /// A task waited for the network as long as allowed: it fails, saying so.
    func networkWaitExpired(_ id: UUID, host: String, limit: Duration) async {
        guard machine.state(of: id) == .waitingForNetwork, !shuttingDown else { return }
        timers[id] = nil
        let error = told(
            HaulError(
                .connection,
                "No usable route to \(host) for \(limit.spoken): the network did not come back",
                hint: "Check the network connection, then \(HaulError.rerunToResume) (--wait-for-network waits longer)"
            ),
            about: id
        )
        do {
            try await store.setState(id, .failed, error: error.description, code: error.code)
        } catch {
            return
        }
        perform(machine.gaveUp(id), ending: .failed(error))  // Unless it moved meanwhile.
    }

    /// A waiting task's route is back: it queues in its old place.
    func comeOnline(_ id: UUID) async {
        guard machine.state(of: id) == .waitingForNetwork, !shuttingDown else { return }
        disarmRetry(id)
        do {
            try await store.setState(id, .queued)
        } catch {
            return  // The next change, or a resume, tries again.
        }
        guard machine.state(of: id) == .waitingForNetwork else { return }
        logger.notice("the network is back", metadata: ["haul.task": "\(id)"])
        perform(machine.online(id))
        admitAndStart()
    }
}
