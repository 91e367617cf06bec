import Foundation
import Haul
import HaulWire
import HaulWireMapping
import Synchronization

/// One `haul get` run: adds its downloads to a manager, follows their events, draws
/// progress, turns Ctrl-C into a clean stop, and gathers how each one ended.
struct GetSession {
    /// How one file ended.
    enum Outcome: Sendable {
        case completed(DownloadResult)
        case failed(HaulError)
    }

    /// What the command reports at the end.
    struct Summary: Sendable {
        /// Files in the order they were given, with how each ended (nil: stopped before the end).
        var files: [(url: String, id: UUID?, outcome: Outcome?)]
        var signal: Int32?
        var elapsed: Duration
        /// Files that did not end, as the store has them after the stop.
        var stopped: [UUID: DownloadInfo]
    }

    let manager: DownloadManager
    let requests: [DownloadRequest]
    let quiet: Bool
    let json: Bool

    /// What the event consumer, the renderer and the end report share.
    final class Board: Sendable {
        struct State {
            var names: [UUID: String] = [:]
            var order: [UUID] = []
            var progress: [UUID: DownloadProgress] = [:]
            var outcomes: [UUID: Outcome] = [:]
            var running: Set<UUID> = []
            var finishedLines: [String] = []
            /// Lines to print once whatever the mode (retries), oldest first.
            var notices: [String] = []
            /// Per task, the retries already announced.
            var announcedRetries: [UUID: Int] = [:]
            /// Each task's hooks, and the tasks whose hook has not reported yet.
            var hooks: [UUID: Hooks] = [:]
            var pendingHooks: Set<UUID> = []
            /// Every task added while the command runs, by id (a followed Metalink's files).
            var urls: [UUID: URL] = [:]
            /// The tasks a followed Metalink added, in its order: the command waits for them too.
            var followed: [UUID] = []
            /// How many times each task is in `order`, and how many of `order`'s entries have
            /// an outcome: whether all have ended is known at each event without a pass over
            /// them all (which made `haul get -i` of thousands of files quadratic).
            var listed: [UUID: Int] = [:]
            var ended = 0

            mutating func enlist(_ id: UUID) {
                order.append(id)
                listed[id, default: 0] += 1
                if outcomes[id] != nil { ended += 1 }
            }

            mutating func end(_ id: UUID, _ outcome: Outcome) {
                if outcomes.updateValue(outcome, forKey: id) == nil { ended += listed[id, default: 0] }
            }

            /// Every file has ended, and every hook that ended one has reported.
            var isFinished: Bool { ended == order.count && pendingHooks.isEmpty }
        }

        let state = Mutex(State())

        func add(_ id: UUID, name: String, hooks: Hooks = .none) {
            state.withLock {
                $0.names[id] = name
                $0.enlist(id)
                $0.hooks[id] = hooks
            }
        }

        /// The notices not printed yet; the caller prints them.
        func takeNotices() -> [String] {
            state.withLock { state in
                defer { state.notices.removeAll() }
                return state.notices
            }
        }

        /// Applies an event; true once every added task has ended.
        func apply(_ event: DownloadEvent) -> Bool {
            state.withLock { state in
                switch event {
                case .progress(let id, let progress):
                    state.progress[id] = progress
                    if let name = progress.fileName { state.names[id] = name }
                    // A new run of the task counts from 0 again.
                    if progress.retries < state.announcedRetries[id, default: 0] {
                        state.announcedRetries[id] = progress.retries
                    }
                    if progress.retries > state.announcedRetries[id, default: 0], let retry = progress.lastRetry {
                        state.announcedRetries[id] = progress.retries
                        let name = state.order.count > 1 ? state.names[id] : nil
                        state.notices.append(ProgressRenderer.retryLine(retry, name: name))
                    }
                case .stateChanged(let id, let from, let to, let reason):
                    if to == .running { state.running.insert(id) } else { state.running.remove(id) }
                    let name = state.names[id] ?? "the download"
                    if to == .waitingForNetwork {
                        let why =
                            reason == .metered
                            ? "its route is metered and it may not use metered networks"
                            : "no usable route to its server"
                        state.notices.append(
                            "haul: \(name): waiting for the network… (\(why); --wait-for-network sets how long)"
                        )
                    } else if from == .waitingForNetwork, to == .queued {
                        state.notices.append("haul: \(name): the network is back; resuming")
                    }
                case .added(let info):
                    state.urls[info.id] = info.url
                case .completed(let id, let result):
                    if state.hooks[id]?.onComplete != nil { state.pendingHooks.insert(id) }
                    if let problem = result.followFailure {
                        // The Metalink is in place, but none of what it describes.
                        let error = HaulError(
                            .invalidArgument,
                            problem,
                            hint: "Check the Metalink, or give --no-follow-metalink to keep it as a file"
                        )
                        state.end(id, .failed(error))
                        state.finishedLines.append("Failed: \(error.description)")
                    } else {
                        state.end(id, .completed(result))
                        state.finishedLines.append(GetSession.savedLine(result))
                    }
                    for followed in result.followed where state.listed[followed] == nil {
                        // A Metalink's files: the command waits for them as for its own.
                        state.enlist(followed)
                        state.followed.append(followed)
                        state.names[followed] = state.urls[followed]?.lastPathComponent ?? "a Metalink's file"
                    }
                case .failed(let id, let error):
                    state.end(id, .failed(error))
                    if state.hooks[id]?.onError != nil { state.pendingHooks.insert(id) }
                    state.finishedLines.append("Failed: \(error.description)")
                case .hookFinished(let id, let run):
                    state.pendingHooks.remove(id)
                    if let failure = run.failure {
                        let name = state.names[id] ?? "the download"
                        state.notices.append(
                            "haul: \(name): the --on-\(run.moment.rawValue) hook \(run.program) failed: \(failure)"
                        )
                    }
                case .resumed, .networkChanged:
                    break
                }
                return state.isFinished
            }
        }
    }

    func run() async throws -> Summary {
        let started = ContinuousClock.now
        let events = manager.events()
        let board = Board()
        var files: [(url: String, id: UUID?, outcome: Outcome?)] = []
        func added(_ info: DownloadInfo, for request: DownloadRequest) {
            board.add(
                info.id,
                name: info.path.map { ($0 as NSString).lastPathComponent } ?? request.url.lastPathComponent,
                hooks: request.hooks
            )
            files.append((Redaction.url(request.url), info.id, nil))
        }
        // All at once, in one store transaction; when one of them is refused (the batch then
        // adds none), one by one, so each refusal is reported and the others still run.
        if requests.count > 1, let infos = try? await manager.download(requests) {
            for (info, request) in zip(infos, requests) { added(info, for: request) }
        } else {
            for request in requests {
                do {
                    added(try await manager.download(request), for: request)
                } catch let error as HaulError {
                    if requests.count == 1 { throw error }
                    files.append((Redaction.url(request.url), nil, .failed(error)))
                }
            }
        }
        let received = SignalStream.Received()
        if files.contains(where: { $0.id != nil }) { await follow(events, on: board, received: received) }
        let (outcomes, followed, urls) = board.state.withLock { ($0.outcomes, $0.followed, $0.urls) }
        for id in followed {
            files.append((urls[id].map(Redaction.url) ?? id.shown, id, nil))
        }
        var stopped: [UUID: DownloadInfo] = [:]
        for index in files.indices {
            guard let id = files[index].id else { continue }
            files[index].outcome = outcomes[id]
            if outcomes[id] == nil { stopped[id] = try? await manager.info(id) }
        }
        return Summary(files: files, signal: received.signal, elapsed: ContinuousClock.now - started, stopped: stopped)
    }

    /// Shows the downloads' progress from `events` on `board` until every download has
    /// ended, stopping them all at SIGINT or SIGTERM (`received` keeps which), or when
    /// nobody reads the JSON lines any more.
    private func follow(_ events: DownloadEvents, on board: Board, received: SignalStream.Received) async {
        let signals = SignalStream.watch([SIGINT, SIGTERM])
        // One file, unless it turns out to be a Metalink whose files follow.
        let (manager, quiet, json, single) = (self.manager, self.quiet, self.json, requests.count == 1)
        enum Child { case events, other }
        await withTaskGroup(of: Child.self) { group in
            group.addTask {
                for await event in events {
                    if json, !JSONEvents.print(event) {
                        // Nobody reads stdout any more (`| head -1`): stop as on a signal,
                        // checkpointing every download, and end quietly.
                        received.record(SIGPIPE)
                        await manager.shutdown()
                        break
                    }
                    if board.apply(event) { break }
                }
                return .events
            }
            group.addTask {
                var renderer = MultiProgressRenderer(quiet: quiet || json, single: single)
                while !Task.isCancelled {
                    renderer.draw(board)
                    try? await Task.sleep(for: .milliseconds(100))
                }
                renderer.finish(board)
                return .other
            }
            group.addTask {
                for await signal in signals {
                    received.record(signal)
                    await manager.shutdown()
                    break
                }
                return .other
            }
            while let child = await group.next() {
                if child == .events { group.cancelAll() }
            }
        }
    }

    static func savedLine(_ result: DownloadResult) -> String {
        if result.notModified {
            return "Up to date: \(result.path) (\(Format.bytes(result.bytes))); the server has nothing newer"
        }
        if result.alreadyComplete {
            return
                "Already complete: \(result.path) (\(Format.bytes(result.bytes))); nothing fetched (-N asks the server for a newer version)"
        }
        var line = "Saved \(result.path) (\(Format.bytes(result.bytes)) in \(Format.seconds(result.elapsed))"
        let seconds = Double(result.elapsed.components.seconds) + Double(result.elapsed.components.attoseconds) / 1e18
        if seconds > 0 { line += ", \(Format.speed(Double(result.bytesFetched) / seconds))" }
        if let resumedFrom = result.resumedFrom {
            line += "; resumed at \(Format.bytes(resumedFrom)), fetched \(Format.bytes(result.bytesFetched))"
        }
        line += ")"
        if result.piecesChecked > 0 {
            line += "; \(result.piecesChecked - result.piecesRefetched) pieces checked"
            if result.piecesRefetched > 0 { line += ", \(result.piecesRefetched) fetched again" }
        }
        if result.sources.count > 1 {
            let used = result.sources.filter { $0.bytes > 0 }.count
            line += "; from \(used) of \(result.sources.count) sources"
            for source in result.sources {
                if let reason = source.dropped {
                    line += "\nhaul: dropped \(Redaction.url(source.url)): \(Redaction.text(reason))"
                }
            }
        }
        switch result.verifiedAgainst {
        case "checksum"?, "pieceHashes"?, nil: break
        case "sampled"?:
            line +=
                "; no checksum or server digest: the mirrors' bytes were compared with the URL's in a 64 KiB window of each stretch they served"
        case let header?:
            line += "; verified against the server's \(header)"
        }
        if !result.lengthConfirmed {
            line += "; the server gave no length and could not confirm the end: the file may be incomplete"
        }
        return line
    }
}

/// `--json`: one JSON object per event on stdout, for scripts.
enum JSONEvents {
    /// Prints one event; false when stdout is closed.
    static func print(_ event: DownloadEvent) -> Bool {
        Output.standard(EventRecord(event).jsonLine() + "\n")
    }
}
