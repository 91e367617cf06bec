import Foundation

// MARK: - Progress, listings and events

extension DownloadManager {
    nonisolated func publishProgressUntilShutdown() async {
        while await publishProgress() {
            do {
                try await Task.sleep(for: .milliseconds(100))
            } catch {
                return  // Woken because every transfer has ended.
            }
        }
    }

    /// Publishes what changed since the last tick; false once the manager is shutting down.
    func publishProgress() -> Bool {
        guard !shuttingDown || !machine.running.isEmpty else { return false }
        for id in machine.running {
            guard let run = runs[id] else { continue }
            let progress = run.handles.progress.snapshot()
            if run.lastProgress != progress {
                run.lastProgress = progress
                hub.publish(.progress(id: id, progress))
            }
        }
        return true
    }

    // MARK: Looking

    /// Every task of this manager's kind (background or not) in the store, in queue order;
    /// with `session`, only that session's; with `page`, only that page of them.
    /// - Throws: ``HaulError/Code/notFound`` when the page's `after` task no longer exists.
    public func tasks(session: String? = nil, page: TaskPage? = nil) async throws -> [DownloadInfo] {
        let infos =
            if let page {
                try await store.infos(page: page, background: background, session: session)
            } else {
                try await store.infos(ids: nil, background: background, session: session)
            }
        let snapshot = machine.snapshot
        return infos.map(snapshot.shown)
    }

    /// The tasks whose ids begin with `hex` (an aria2 GID or a prefix of one: 1 to 32 hex
    /// digits), at most `limit`, shown as ``tasks(session:page:)`` shows them: read from the
    /// ids' index, not found among every task. None for text that is not such digits.
    package func tasks(idPrefix hex: String, limit: Int) async throws -> [DownloadInfo] {
        guard let prefix = IDPrefix(hex: hex) else { return [] }
        var page = try TaskPage(limit: limit)
        page.idPrefix = prefix
        return try await tasks(page: page)
    }

    /// The tasks running, as ``tasks(session:page:)`` shows them, read by their ids: with a
    /// shared queue, those the store says run (on any manager), in queue order; then those
    /// running here that the store does not call running yet (a run just started).
    package func runningTasks() async throws -> [DownloadInfo] {
        var infos: [DownloadInfo] = []
        if sharedQueue != nil {
            let page = try TaskPage(limit: TaskPage.maxLimit, states: [.running])
            infos = try await store.infos(page: page, background: background, session: nil)
        }
        let listed = Set(infos.map(\.id))
        let here = machine.runningIDs.filter { !listed.contains($0) }
        if !here.isEmpty { infos += try await store.infos(ids: here, background: background, session: nil) }
        let snapshot = machine.snapshot
        return infos.map(snapshot.shown)
    }

    /// `counts` (tasks per state, as the store has them) as ``tasks(session:)`` shows the
    /// tasks: a run started here that the store still calls queued counts as running, a
    /// state the store refused as the state kept here. Every count shown (`haul status`,
    /// `/metrics`, the dashboard) comes from this, so running and waiting agree with the
    /// per-state counts and with the list.
    public func stateCounts(correcting counts: [String: Int]) async throws -> [String: Int] {
        let ids = machine.snapshot.overlaidIDs
        guard !ids.isEmpty else { return counts }
        let infos = try await store.infos(ids: ids, background: nil, session: nil)
        let snapshot = machine.snapshot
        var counts = counts
        for info in infos {
            let shown = snapshot.shown(info).state
            guard shown != info.state, let stored = counts[info.state.rawValue], stored > 0 else { continue }
            counts[info.state.rawValue] = stored > 1 ? stored - 1 : nil
            counts[shown.rawValue, default: 0] += 1
        }
        return counts
    }

    /// One task.
    /// - Throws: ``HaulError/Code/notFound`` when there is no such task.
    public func info(_ id: UUID) async throws -> DownloadInfo {
        guard let info = try await store.infos(ids: [id], background: nil, session: nil).first else {
            throw HaulError(.notFound, "No task \(id.shown)")
        }
        return overlaid(info)
    }

    /// The manager as a whole: how many tasks run and wait, and their combined speed.
    public func overallProgress() -> ManagerProgress {
        let speeds = machine.running.compactMap { runs[$0]?.handles.progress.snapshot().bytesPerSecond }
        let snapshot = machine.snapshot
        return ManagerProgress(
            running: snapshot.running.count,
            waiting: snapshot.waiting,
            bytesPerSecond: speeds.reduce(0, +)
        )
    }

    /// Live progress of a running task, nil for others.
    public func progress(of id: UUID) -> DownloadProgress? {
        runs[id]?.handles.progress.snapshot()
    }

    /// The ids of running tasks, in the order they started.
    public var runningTaskIDs: [UUID] { machine.runningIDs }

    /// The ids of waiting tasks, next to start first.
    public var waitingTaskIDs: [UUID] { machine.waitingIDs }

    /// All events from now on.
    public nonisolated func events() -> DownloadEvents { hub.subscribe() }

    /// The events of one task from now on.
    public nonisolated func events(for id: UUID) -> DownloadEvents { hub.subscribe(taskID: id) }

    func resumeData(_ id: UUID) async throws -> ResumeData {
        // Read as a run reads it: with its piece hashes, which resume data carries.
        guard let (record, segments) = try await store.taskForRun(id) else {
            throw HaulError(.notFound, "No task \(id.shown)")
        }
        return ResumeData(record: record, segments: segments)
    }
}

/// A snapshot of a whole ``DownloadManager``.
public struct ManagerProgress: Sendable, Equatable {
    /// Tasks transferring now (in ``TaskState/running``; one asked to make room for others
    /// counts until it has stopped).
    public var running: Int
    /// Queued tasks waiting for a slot.
    public var waiting: Int
    /// Combined speed of the running tasks, each averaged over at least a second.
    public var bytesPerSecond: Double
}
