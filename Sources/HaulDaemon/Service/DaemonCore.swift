import Foundation
import Haul
import Logging
import Synchronization

/// What the API's handlers work on: the manager, its event log, and the daemon's facts.
final class DaemonCore: Sendable {
    let manager: DownloadManager
    let eventLog: EventLog
    let paths: DaemonPaths
    let startedAt: Date
    let logger: Logger
    private let listenAddress = Mutex<String?>(nil)
    private let shutdownTrigger = Mutex<(@Sendable () async -> Void)?>(nil)
    /// Clients attached with "pause my session when I disconnect", per session.
    private let pausingClients = Mutex<[String: Int]>([:])

    init(manager: DownloadManager, eventLog: EventLog, paths: DaemonPaths, logger: Logger) {
        self.manager = manager
        self.eventLog = eventLog
        self.paths = paths
        self.startedAt = Date()
        self.logger = logger
    }

    /// The TCP listener's address, once it listens.
    var listen: String? {
        get { listenAddress.withLock { $0 } }
        set { listenAddress.withLock { $0 = newValue } }
    }

    func onShutdownRequest(_ trigger: @escaping @Sendable () async -> Void) {
        shutdownTrigger.withLock { $0 = trigger }
    }

    /// Stops the daemon cleanly, as SIGTERM does.
    func requestShutdown() async {
        let trigger = shutdownTrigger.withLock { $0 }
        await trigger?()
    }

    func status() async throws -> API.Status {
        let counts = try await manager.store.backgroundStateCounts()
        let overall = await manager.overallProgress()
        let limits = await manager.limits
        return API.Status(
            pid: getpid(),
            version: HaulVersion.current,
            startedAt: startedAt,
            uptimeSeconds: Date().timeIntervalSince(startedAt),
            home: paths.home.path,
            socket: paths.socket,
            store: paths.home.storePath,
            listen: listen,
            tasks: counts,
            running: overall.running,
            waiting: overall.waiting,
            bytesPerSecond: overall.bytesPerSecond,
            maxConcurrentDownloads: limits.maxConcurrentDownloads,
            maxConnectionsPerHost: limits.maxConnectionsPerHost
        )
    }

    /// The ids a selector names; explicit ids must exist.
    func resolve(_ selector: API.Selector) async throws -> (ids: [UUID], explicit: Bool) {
        let given = [selector.ids != nil, selector.session != nil, selector.all == true].filter { $0 }.count
        guard given == 1 else {
            throw HaulError(.invalidArgument, "Name the tasks: give exactly one of ids, session, or all")
        }
        if let ids = selector.ids {
            guard !ids.isEmpty else { throw HaulError(.invalidArgument, "No task ids given") }
            let known = Set(try await manager.tasks().map(\.id))
            if let unknown = ids.first(where: { !known.contains($0) }) {
                throw HaulError(.invalidArgument, "No task \(unknown)")
            }
            return (ids, true)
        }
        return (try await manager.tasks(session: selector.session).map(\.id), false)
    }

    enum Operation: String {
        case pause, resume, cancel, remove
    }

    /// Applies an operation. Explicitly named tasks must be in a state it applies to; a
    /// session or `all` applies it to those that are.
    func apply(_ operation: Operation, to selector: API.Selector) async throws -> [DownloadInfo] {
        let (ids, explicit) = try await resolve(selector)
        let before = try await manager.tasks()
        let states = Dictionary(uniqueKeysWithValues: before.map { ($0.id, $0.state) })
        let applicable: Set<TaskState>
        switch operation {
        case .pause: applicable = [.queued, .running]
        case .resume: applicable = [.paused, .failed]
        case .cancel: applicable = [.queued, .running, .paused, .failed]
        case .remove: applicable = Set(TaskState.allCases)
        }
        var affected: [UUID] = []
        for id in ids {
            guard let state = states[id] else { continue }
            guard applicable.contains(state) else {
                if explicit {
                    throw HaulError(
                        .invalidArgument,
                        "Cannot \(operation.rawValue) task \(id): it is \(state.rawValue)"
                    )
                }
                continue
            }
            switch operation {
            case .pause: try await manager.pause(id)
            case .resume: try await manager.resume(id)
            case .cancel: try await manager.cancel(id)
            case .remove: try await manager.remove(id, deleteFile: selector.deleteFiles ?? false)
            }
            affected.append(id)
        }
        if operation == .remove { return before.filter { affected.contains($0.id) } }
        let after = try await manager.tasks()
        let wanted = Set(affected)
        return after.filter { wanted.contains($0.id) }
    }

    /// A client that wants its session paused when it goes is attached.
    func clientAttached(pausing session: String) {
        pausingClients.withLock { $0[session, default: 0] += 1 }
    }

    /// Such a client's stream ended because the daemon stops: its tasks are checkpointed and
    /// continue at the next start, as the client asked nothing else of a restart.
    func clientLeftAtShutdown(pausing session: String) {
        pausingClients.withLock { clients in
            let count = (clients[session] ?? 1) - 1
            clients[session] = count > 0 ? count : nil
        }
    }

    /// Such a client went; when it was the last of its session, pause the session's tasks.
    func clientDetached(pausing session: String) async {
        let last = pausingClients.withLock { clients -> Bool in
            let count = (clients[session] ?? 1) - 1
            clients[session] = count > 0 ? count : nil
            return count <= 0
        }
        guard last else { return }
        logger.info("the last client of session '\(session)' went away: pausing its tasks")
        do {
            _ = try await apply(.pause, to: .session(session))
        } catch {
            logger.error("cannot pause session '\(session)'", metadata: ["error": "\(error)"])
        }
    }
}
