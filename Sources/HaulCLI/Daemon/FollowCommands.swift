import ArgumentParser
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulWire
import HaulWireMapping
import Synchronization

extension HaulCommand {
    /// `haul events`: what happened in a session while nobody listened, then live events.
    struct Events: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "events",
            abstract: "Show a session's events: those missed since the last time, then live ones.",
            discussion: """
                Each event shown is acknowledged, so the next 'haul events' of the session starts \
                after it. --after ID shows the events after that id instead, acknowledging nothing. \
                Live events follow until Ctrl-C, unless --no-follow.

                \(Examples.block([
                    ("haul events --session nightly", "what happened since the last look, then live"),
                    ("haul events --json --no-follow", "what was missed, as JSON, then exit"),
                    ("haul events --after 120", "the events after #120, acknowledging none"),
                ]))
                """
        )

        @Option(help: "The session.")
        var session: String = DownloadRequest.defaultSession

        @Option(help: "Show the events after this event id (without acknowledging any).")
        var after: Int64?

        @Flag(inversion: .prefixedNo, help: "Keep showing live events.")
        var follow = true

        @Flag(help: "Print events as newline-delimited JSON.")
        var json = false

        @Flag(help: "Pause the session's tasks when this command stops or is killed.")
        var pauseOnExit = false

        func run() async throws {
            try await withDaemon { client in
                try DownloadRequest.validateSession(session)
                if !follow {
                    let records = try await client.loggedEvents(session: session, after: after)
                    // Events a closed stdout did not take are not acknowledged: a later run shows them.
                    for record in records where !show(record) { throw ExitCode(128 + SIGPIPE) }
                    if after == nil, let last = records.last?.eventID {
                        try await client.acknowledge(session: session, through: last)
                    }
                    return
                }
                // Unparsed: --json prints each event as the daemon sent it, without decoding it.
                let events = client.attach(session: session, after: after, pauseOnDisconnect: pauseOnExit).unparsed
                let signals = SignalStream.watch([SIGINT, SIGTERM])
                let lastShown = LastShown()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        // As they arrive, a network read's events at a time: one write for them all.
                        var iterator = events.makeAsyncIterator()
                        while let received = try await iterator.nextAvailable() {
                            let shown = received.filter { $0.kind != .progress }
                            guard try show(shown) else { throw ExitCode(128 + SIGPIPE) }
                            if let eventID = shown.last(where: { $0.eventID != nil })?.eventID {
                                lastShown.id.withLock { $0 = eventID }
                            }
                        }
                        throw HaulError(.connection, "The Haul daemon stopped")
                    }
                    group.addTask {
                        for await _ in signals { return }
                    }
                    try await group.next()
                    group.cancelAll()
                }
                // Stopped by a signal: every event shown is acknowledged before leaving.
                if after == nil, let last = lastShown.id.withLock({ $0 }) {
                    try await client.acknowledge(session: session, through: last)
                }
            }
        }

        /// The id of the last logged event printed.
        private final class LastShown: Sendable {
            let id = Mutex<Int64?>(nil)
        }

        /// Prints events as received, in one write; false when stdout is closed.
        private func show(_ events: [StreamedEvent]) throws -> Bool {
            guard !events.isEmpty else { return true }
            let lines = try events.map { json ? $0.json : EventText.line(try $0.record()) }
            return Output.standard(lines.joined(separator: "\n") + "\n")
        }

        /// Prints one event; false when stdout is closed.
        private func show(_ record: EventRecord) -> Bool {
            // Unbuffered: a script reading the pipe sees each event as it happens.
            let line = json ? record.jsonLine() : EventText.line(record)
            return Output.standard(line + "\n")
        }
    }

    /// `haul wait`: block until tasks end.
    struct Wait: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "wait",
            abstract: "Wait until tasks are done; exit 0 only if every one completed.",
            discussion: """
                Without ids or --session, waits for every task of the daemon.

                \(Examples.block([
                    ("haul wait", "until every task is done"),
                    ("haul add URL && haul wait && echo done", "in a script"),
                    ("haul wait --session nightly", "one session's"),
                ]))
                """
        )

        @Argument(help: "Task ids, or unique prefixes of them.")
        var ids: [String] = []

        @Option(help: "Every task of this session.")
        var session: String?

        @Flag(name: .shortAndLong, help: "Print only failures.")
        var quiet = false

        func run() async throws {
            try await withDaemon { client in
                let wanted = ids.isEmpty ? nil : Set(try await TaskSelection.resolve(ids, client))
                var toldPaused: Set<UUID> = []
                while true {
                    let tasks = try await client.tasks(session: session).filter { wanted?.contains($0.id) ?? true }
                    if let wanted, tasks.count < wanted.count {
                        throw HaulError(.invalidArgument, "\(wanted.count - tasks.count) of the tasks were removed")
                    }
                    let unfinished = tasks.filter { !$0.state.hasEnded }
                    for task in unfinished where task.state == .paused && !toldPaused.contains(task.id) {
                        toldPaused.insert(task.id)
                        CLIError.note(
                            "haul: waiting for paused task \(DaemonOutput.shortID(task.id)); 'haul resume' it to continue"
                        )
                    }
                    if unfinished.isEmpty {
                        try report(tasks)
                        return
                    }
                    try await Task.sleep(for: .milliseconds(200))
                }
            }
        }

        private func report(_ tasks: [DownloadInfo]) throws {
            let completed = tasks.filter { $0.state == .completed }
            let bytes = completed.reduce(Int64(0)) { $0 + ($1.totalBytes ?? 0) }
            if !quiet {
                CLIError.note("Done: \(completed.count) of \(tasks.count) completed (\(Format.bytes(bytes))).")
            }
            for task in tasks where task.state != .completed {
                let reason = task.errorMessage ?? task.state.rawValue
                Output.error("haul: \(task.state.rawValue): \(Redaction.url(task.url)): \(reason)\n")
            }
            guard completed.count != tasks.count else { return }
            // The class of the failures, as haul get would exit for them; 1 when they differ
            // or a task stopped without failing (cancelled, paused by someone else).
            let failed = tasks.filter { $0.state != .completed }
            let classes = Set(failed.map { task in task.errorCode.map(ExitStatus.init) ?? .failure })
            throw (classes.count == 1 ? classes.first ?? .failure : .failure).exit
        }
    }

    /// `haul watch`: live progress of the daemon's running tasks.
    struct Watch: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "watch",
            abstract: "Show the daemon's downloads live, until Ctrl-C.",
            discussion: Examples.block([
                ("haul watch", "every running task, with file names and speed"),
                ("haul watch --session nightly", "one session's"),
            ])
        )

        @Option(help: "Only this session's tasks.")
        var session: String?

        func run() async throws {
            try await withDaemon { client in
                let events = client.liveEvents(session: session)
                let signals = SignalStream.watch([SIGINT, SIGTERM])
                let board = WatchBoard()
                let terminal = isatty(STDERR_FILENO) == 1
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        for try await record in events { board.apply(record) }
                        throw HaulError(.connection, "The Haul daemon stopped")
                    }
                    group.addTask {
                        for await _ in signals { return }
                    }
                    group.addTask {
                        var drawn = 0
                        while true {
                            let status = try await client.status()
                            // Each task's file name, asked once when it first shows progress.
                            for id in board.unnamed {
                                let info = try? await client.info(id)
                                let file = info?.path.map { ($0 as NSString).lastPathComponent }
                                board.name(
                                    id,
                                    file ?? info.map { Redaction.url($0.url) }
                                        ?? DaemonOutput.shortID(id)
                                )
                            }
                            let lines = board.lines(status: status, session: session)
                            if terminal {
                                var text = drawn > 0 ? "\u{1B}[\(drawn)F\u{1B}[J" : ""
                                text += lines.joined(separator: "\n") + "\n"
                                Output.error(text)
                                drawn = lines.count
                                try await Task.sleep(for: .milliseconds(250))
                            } else {
                                Output.error(((lines.last ?? "") + "\n"))
                                try await Task.sleep(for: .seconds(5))
                            }
                        }
                    }
                    try await group.next()
                    group.cancelAll()
                }
            }
        }
    }
}

/// The latest progress of each task, as `haul watch` shows it.
final class WatchBoard: Sendable {
    private struct Line {
        var name: String
        var record: EventRecord
        var named = false
    }

    private let state = Mutex<[UUID: Line]>([:])

    /// The tasks shown by their id alone, for want of a file name.
    var unnamed: [UUID] {
        state.withLock { lines in lines.filter { $0.value.named == false }.map(\.key) }
    }

    /// Shows `id` by its file name.
    func name(_ id: UUID, _ name: String) {
        state.withLock { lines in
            lines[id]?.name = name
            lines[id]?.named = true
        }
    }

    func apply(_ record: EventRecord) {
        guard let taskID = record.taskID else { return }  // The network: the status line tells it.
        state.withLock { lines in
            switch record.kind {
            case .progress:
                if lines[taskID] == nil {
                    lines[taskID] = Line(name: DaemonOutput.shortID(taskID), record: record)
                } else {
                    lines[taskID]?.record = record
                }
            case .completed, .failed:
                lines[taskID] = nil
            case .state where record.to != .running:
                lines[taskID] = nil
            default:
                break
            }
        }
    }

    func lines(status: API.Status, session: String?) -> [String] {
        let lines = state.withLock { Array($0.values) }.sorted { $0.name < $1.name }
        var text = lines.map { line -> String in
            let record = line.record
            var part = "\(line.name)  \(Format.bytes(record.received ?? 0))"
            if let total = record.total, total > 0 {
                part += " of \(Format.bytes(total)) (\((record.received ?? 0) * 100 / total)%)"
            }
            part += "  \(Format.speed(Double(record.bytesPerSecond ?? 0)))"
            if let eta = record.etaSeconds { part += "  ETA \(Format.duration(.seconds(eta)))" }
            return part
        }
        let done = status.tasks["completed"] ?? 0
        text.append(
            "\(status.running) running, \(status.waiting) waiting, \(done) completed; \(Format.speed(status.bytesPerSecond))"
                + (status.network.flatMap(Self.networkNote) ?? "") + (session.map { " (session \($0))" } ?? "")
        )
        return text
    }
}

extension WatchBoard {
    /// `; offline, 2 waiting for the network` when the network holds anything up.
    static func networkNote(_ network: API.Status.Network) -> String? {
        guard !network.usable || network.waitingTasks > 0 else { return nil }
        var note = network.usable ? "; " : "; offline"
        if network.waitingTasks > 0 {
            note += (network.usable ? "" : ", ") + "\(network.waitingTasks) waiting for the network"
        }
        return note
    }
}

/// One readable line per event.
enum EventText {
    static func line(_ record: EventRecord) -> String {
        var parts: [String] = []
        if let id = record.eventID { parts.append("#\(id)") }
        if let time = record.time { parts.append(ISO8601DateFormatter().string(from: time)) }
        if let taskID = record.taskID { parts.append(DaemonOutput.shortID(taskID)) }
        switch record.kind {
        case .added: parts.append("added \(record.url ?? "")")
        case .state:
            parts.append(
                "\(record.from?.rawValue ?? "?") -> \(record.to?.rawValue ?? "?")"
                    + (record.reason.map { " (\($0.rawValue))" } ?? "")
            )
        case .network: parts.append("network: " + networkText(record))
        case .progress: parts.append("progress \(Format.bytes(record.received ?? 0))")
        case .resumed: parts.append("resumed at \(Format.bytes(record.offset ?? 0))")
        case .completed:
            parts.append("completed \(record.path ?? "")" + (record.bytes.map { " (\(Format.bytes($0)))" } ?? ""))
        case .failed: parts.append("failed: \(record.error ?? "unknown error")")
        case .hook:
            let which = record.hook.map { "--on-\($0.rawValue)" } ?? "hook"
            parts.append("\(which) \(record.program ?? "") " + (record.error ?? "exited with status 0"))
        }
        return parts.joined(separator: "  ")
    }

    /// `default route via eth0 (10.0.0.2), metered; metered networks allowed`, or `no default route`.
    static func networkText(_ record: EventRecord) -> String {
        var text = "no default route"
        if let interface = record.interface {
            text = "default route via \(interface) (\(record.address ?? "?"))"
            if record.connected != true { text += ", down" }
            if record.metered == true { text += ", metered" }
        }
        return text + "; metered networks " + (record.allowMetered == false ? "not allowed" : "allowed")
    }
}
