import ArgumentParser
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulWire
import HaulWireMapping

/// Which of the daemon's tasks a command is about: ids (or unique prefixes), a session, or all.
struct TaskSelection: ParsableArguments {
    @Argument(help: "Task ids, or unique prefixes of them (as 'haul list' shows).")
    var ids: [String] = []

    @Option(help: "Every task of this session.")
    var session: String?

    @Flag(help: "Every task of the daemon.")
    var all = false

    func validate() throws {
        let given = [!ids.isEmpty, session != nil, all].filter { $0 }.count
        guard given == 1 else { throw ValidationError("Give task ids, --session NAME, or --all") }
    }

    /// Applies `operation` through the daemon and says how many tasks it applied to.
    func perform(_ operation: TaskOperation, _ verb: String, deleteFiles: Bool = false) async throws {
        try await withDaemon { client in
            var selector: API.Selector
            if let session {
                selector = .session(session)
            } else if all {
                selector = .everything
            } else {
                selector = .tasks(try await TaskSelection.resolve(ids, client))
            }
            selector.deleteFiles = deleteFiles ? true : nil
            let done = try await client.perform(operation, selector)
            // Named tasks the daemon left as they were: already where the operation takes them.
            let already = (selector.ids ?? []).filter { id in !done.contains { $0.id == id } }
            guard !already.isEmpty else {
                CLIError.note("\(verb) \(DaemonOutput.count(done.count)).")
                return
            }
            let state: String
            switch operation {
            case .pause: state = "paused"
            case .resume: state = "queued or running"
            case .cancel: state = "cancelled"
            case .remove: state = "removed"
            }
            let named = already.map(DaemonOutput.shortID).joined(separator: ", ")
            CLIError.note(
                (done.isEmpty ? "" : "\(verb) \(DaemonOutput.count(done.count)). ") + "Already \(state): \(named)."
            )
        }
    }

    /// Full ids, or unique prefixes of the daemon's task ids.
    static func resolve(_ texts: [String], _ client: HaulClient) async throws -> [UUID] {
        let parsed = texts.compactMap(UUID.init(uuidString:))
        if parsed.count == texts.count { return parsed }
        let known = try await client.tasks().map(\.id)
        return try texts.map { text in
            if let id = UUID(uuidString: text) { return id }
            let matches = known.filter { $0.uuidString.lowercased().hasPrefix(text.lowercased()) }
            guard matches.count == 1 else {
                throw HaulError(
                    .invalidArgument,
                    matches.isEmpty ? "No task '\(text)'" : "'\(text)' matches \(matches.count) tasks",
                    hint: matches.isEmpty ? "See 'haul list'" : "Give more of the id"
                )
            }
            return matches[0]
        }
    }
}

/// Runs a daemon command body, turning Haul errors into one line and their exit status:
/// 8 when the daemon cannot be reached (or goes away meanwhile), else the class of what it
/// answered.
func withDaemon(autoStart: Bool = true, _ body: (HaulClient) async throws -> Void) async throws {
    let client: HaulClient
    do {
        client = try await DaemonConnection.connect(autoStart: autoStart)
    } catch let error as HaulError {
        CLIError.print(error)
        throw ExitStatus.daemon.exit
    }
    do {
        try await body(client)
        try? await client.shutdown()
    } catch let error as HaulError {
        try? await client.shutdown()
        CLIError.print(error)
        // Only the daemon is talked to: a connection that fails is the daemon's.
        throw error.code == .connection ? ExitStatus.daemon.exit : ExitStatus(error).exit
    } catch {
        try? await client.shutdown()
        throw error
    }
}

extension HaulCommand {
    /// `haul add URL…`: queue downloads in the daemon.
    struct Add: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "add",
            abstract: "Queue downloads in the background daemon (started if none runs).",
            discussion: """
                Prints the id of each task. The downloads go on after this command, and after you \
                log out; follow them with 'haul watch', 'haul events' or 'haul wait'.

                \(Examples.block([
                    ("haul add https://example.org/big.iso", "queue one download here"),
                    ("haul add -d /data -i urls.txt --session nightly", "queue a list in a session"),
                    ("haul add -i million.txt > ids.txt", "any number: sent 5,000 at a time, each batch all or nothing"),
                    ("haul add --priority 10 URL", "ahead of the queue"),
                    ("haul add -N -d /data URL", "check the file there for a newer version"),
                ]))
                """
        )

        @OptionGroup var downloads: DownloadOptions

        @Option(help: "The session the tasks belong to.")
        var session: String = DownloadRequest.defaultSession

        @Option(help: "Higher starts sooner: -1000 to 1000.")
        var priority: Int = 0

        @Flag(help: "Print the tasks as JSON.")
        var json = false

        @Option(help: "Send the downloads to the daemon this many at a time: 1 to 50000.")
        var batch = AddBatchSize.defaultSize

        func validate() throws {
            guard (1...50_000).contains(batch) else { throw ValidationError("--batch takes 1 to 50000") }
            if downloads.streamsToStandardOutput {
                throw ValidationError(
                    "-o - streams to this command's stdout, which the daemon does not have; use haul get -o -"
                )
            }
        }

        func run() async throws {
            try await withDaemon { client in
                try DownloadRequest.validateSession(session)
                try DownloadManager.validatePriority(priority)
                let requests = try downloads.requests(session: session)
                downloads.connection.warnIfInsecure()
                var output = AddOutput(json: json, total: requests.count, batch: batch)
                let batches = AddBatches(
                    size: batch,
                    prepare: { [priority] in try AddBatchBody($0, priority: priority) },
                    send: { try await client.post($0) },
                    read: { [json] answer in
                        try json ? answer.tasks().map(AddedTask.task) : answer.ids().map(AddedTask.id)
                    }
                )
                do {
                    try await batches.run(requests) { try output.print($0) }
                } catch {
                    try? output.finish()
                    throw error
                }
                try output.finish()
            }
        }
    }

    /// `haul list`: the daemon's tasks.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "list",
            abstract: "List the daemon's tasks.",
            discussion: Examples.block([
                ("haul list", "every task, with the reasons of failures below"),
                ("haul list --session nightly --json", "one session's, for scripts"),
                ("haul list --limit 50", "the first 50; it says how to list the next"),
            ])
        )

        @Option(help: "Only this session's tasks.")
        var session: String?

        @Flag(help: "Print the tasks as JSON.")
        var json = false

        @Option(help: "At most this many tasks: 1 to 10000.")
        var limit: Int?

        @Option(help: "The tasks after this one (its full id) in queue order: the next page.")
        var after: String?

        func validate() throws {
            if let limit, !(1...TaskPage.maxLimit).contains(limit) { throw ValidationError("--limit takes 1 to 10000") }
            if let after, UUID(uuidString: after) == nil {
                throw ValidationError("--after takes a task's full id, as 'haul list --json' shows it")
            }
        }

        func run() async throws {
            try await withDaemon { client in
                let page = try TaskPage.asked(limit: limit, after: after.flatMap(UUID.init(uuidString:)))
                let tasks = try await client.tasks(session: session, page: page)
                if json {
                    print(try DaemonOutput.json(tasks))
                } else if tasks.isEmpty {
                    CLIError.note(page?.after == nil ? "No tasks." : "No more tasks.")
                } else {
                    print(DaemonOutput.table(tasks))
                }
                if let page, tasks.count == page.limit, let last = tasks.last, !json {
                    let session = session.map { " --session \($0)" } ?? ""
                    CLIError.note("More may follow: haul list\(session) --limit \(page.limit) --after \(last.id.shown)")
                }
            }
        }
    }

    struct Pause: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "pause",
            abstract: "Pause tasks, keeping their data.",
            discussion: Examples.block([
                ("haul pause 3f2a9c1e", "one task, by the start of its id"),
                ("haul pause --session nightly", "a session's"),
                ("haul pause --all", "every task"),
            ])
        )
        @OptionGroup var selection: TaskSelection

        func run() async throws { try await selection.perform(.pause, "Paused") }
    }

    struct Resume: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "resume",
            abstract: "Resume paused or failed tasks.",
            discussion: Examples.block([
                ("haul resume 3f2a9c1e", "one task, from its checkpoint"),
                ("haul resume --all", "every paused or failed task"),
            ])
        )
        @OptionGroup var selection: TaskSelection

        func run() async throws { try await selection.perform(.resume, "Resumed") }
    }

    struct Cancel: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "cancel",
            abstract: "Cancel tasks and delete their partial data.",
            discussion: Examples.block([
                ("haul cancel 3f2a9c1e", "one task"),
                ("haul cancel --session nightly", "a session's"),
            ])
        )
        @OptionGroup var selection: TaskSelection

        func run() async throws { try await selection.perform(.cancel, "Cancelled") }
    }

    struct Remove: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "remove",
            abstract: "Forget tasks (cancelling unfinished ones); finished files stay unless --delete-files.",
            discussion: Examples.block([
                ("haul remove 3f2a9c1e", "forget one task"),
                ("haul remove --all --delete-files", "forget everything, deleting finished files"),
            ])
        )
        @OptionGroup var selection: TaskSelection

        @Flag(help: "Also delete the finished files.")
        var deleteFiles = false

        func run() async throws { try await selection.perform(.remove, "Removed", deleteFiles: deleteFiles) }
    }

}

/// How daemon commands print tasks.
enum DaemonOutput {
    /// The fleet: this node, the store, and `NODE  LEASES  HEARTBEAT  SPEED` for each daemon.
    static func fleet(_ fleet: API.Status.Fleet, now: Date = Date()) -> String {
        func span(_ seconds: Double) -> String {
            seconds < 60
                ? "\(Int(seconds.rounded())) s" : Format.duration(.milliseconds(Int64(seconds * 1000)))
        }
        var lines = ["fleet:    node \(fleet.node), leases of \(span(fleet.leaseSeconds))"]
        if let caps = fleet.caps {
            let parts = [
                caps.maxConcurrentDownloads.map { "\($0) downloads" },
                caps.maxDownloadsPerHost.map { "\($0) per host" },
                caps.overallRateLimit.map { Format.speed(Double($0)) },
            ].compactMap { $0 }
            lines.append("caps:     \(parts.isEmpty ? "none (each node's own limits)" : parts.joined(separator: ", "))")
        }
        var rows = [["NODE", "STATE", "RUNNING", "LIMIT", "HEARTBEAT", "SPEED"]]
        for node in fleet.nodes {
            let silent = max(0, now.timeIntervalSince(node.heartbeatAt))
            let state = node.state(at: now, leaseSeconds: fleet.leaseSeconds)
            rows.append([
                node.name + (node.name == fleet.node ? " (this)" : ""), state,
                "\(node.leases) of \(node.maxConcurrentDownloads.map(String.init) ?? "?")",
                node.overallRateLimit.map { Format.speed(Double($0)) } ?? "none",
                node.stoppedAt != nil ? "-" : "\(span(silent)) ago", Format.speed(node.bytesPerSecond),
            ])
        }
        let widths = (0..<5).map { column in rows.map { $0[column].count }.max() ?? 0 }
        lines += rows.map { row in
            "  "
                + (0..<5).map { row[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                .joined(separator: "  ") + "  " + row[5]
        }
        return lines.joined(separator: "\n")
    }

    static func count(_ n: Int) -> String { n == 1 ? "1 task" : "\(n) tasks" }

    /// A task's id as `haul list` shows it: its first 8 hex digits, lower-case.
    static func shortID(_ id: UUID) -> String { String(id.shown.prefix(8)) }

    static func json(_ value: some Encodable) throws -> String {
        String(decoding: try HaulJSON.encoder(pretty: true).encode(value), as: UTF8.self)
    }

    /// `ID  STATE  PROGRESS  SIZE  SESSION  [NODE]  NAME`, one task per line (the state a
    /// word, so the columns hold; NODE in fleet mode, the daemon running each); then, below, why each failed or waiting task is where it is: the
    /// error of a failed one, the wait of an offline one, the next try and last error of one
    /// waiting to try again.
    static func table(_ tasks: [DownloadInfo], now: Date = Date()) -> String {
        var lines = [["ID", "STATE", "DONE", "SIZE", "SESSION", "FILE"]]
        var notes: [String] = []
        for task in tasks {
            let done = task.totalBytes.map { $0 > 0 ? "\(task.bytesCommitted * 100 / $0)%" : "100%" } ?? "-"
            let name = task.path.map { ($0 as NSString).lastPathComponent } ?? Redaction.url(task.url)
            var state = task.state == .waitingForNetwork ? "offline" : task.state.rawValue
            let id = DaemonOutput.shortID(task.id)
            if let error = task.errorMessage, task.state == .failed || task.state == .waitingForNetwork {
                notes.append("\(id): \(task.state == .failed ? "failed: " : "")\(Redaction.text(error))")
            }
            if task.sources.count > 1 {
                let used = task.sources.filter { $0.dropped == nil }.count
                var note = "\(id): \(used) of \(task.sources.count) sources"
                for source in task.sources {
                    if let reason = source.dropped {
                        note += "; dropped \(Redaction.url(source.url)): \(Redaction.text(reason))"
                    }
                }
                notes.append(note)
            }
            if task.state == .retrying, let next = task.nextTryAt {
                let wait = Duration.milliseconds(Int64(max(0, next.timeIntervalSince(now)) * 1000))
                state += " in \(Format.duration(wait))"
                notes.append(
                    "\(DaemonOutput.shortID(task.id)): next try in \(Format.duration(wait)); last error: \(Redaction.text(task.errorMessage ?? "unknown"))"
                )
            }
            lines.append([
                DaemonOutput.shortID(task.id), state, done,
                task.totalBytes.map(Format.bytes) ?? "?", task.session, name,
            ])
        }
        // Fleet mode: which daemon runs each running task, in a column of its own.
        if tasks.contains(where: { $0.node != nil }) {
            lines[0].insert("NODE", at: 5)
            for (index, task) in tasks.enumerated() { lines[index + 1].insert(task.node ?? "-", at: 5) }
        }
        let fixed = lines[0].count - 1
        let widths = (0..<fixed).map { column in lines.map { $0[column].count }.max() ?? 0 }
        let table = lines.map { row in
            (0..<fixed).map { row[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                .joined(separator: "  ") + "  " + row[fixed]
        }
        return (table + (notes.isEmpty ? [] : [""] + notes)).joined(separator: "\n")
    }
}
