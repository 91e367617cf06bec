import ArgumentParser
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulWire

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
            CLIError.note("\(verb) \(DaemonOutput.count(done.count)).")
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
            abstract: "Queue downloads in the background daemon (started if none runs).",
            discussion: """
                Prints the id of each task. The downloads go on after this command, and after you \
                log out; follow them with 'haul watch', 'haul events' or 'haul wait'.

                \(Examples.block([
                    ("haul add https://example.org/big.iso", "queue one download here"),
                    ("haul add -d /data -i urls.txt --session nightly", "queue a list in a session"),
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

        func validate() throws {
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
                let added = try await client.add(requests, priority: priority)
                if json {
                    print(try DaemonOutput.json(added))
                } else {
                    for info in added { print(info.id.uuidString) }
                }
            }
        }
    }

    /// `haul list`: the daemon's tasks.
    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "List the daemon's tasks.",
            discussion: Examples.block([
                ("haul list", "every task, with the reasons of failures below"),
                ("haul list --session nightly --json", "one session's, for scripts"),
            ])
        )

        @Option(help: "Only this session's tasks.")
        var session: String?

        @Flag(help: "Print the tasks as JSON.")
        var json = false

        func run() async throws {
            try await withDaemon { client in
                let tasks = try await client.tasks(session: session)
                if json {
                    print(try DaemonOutput.json(tasks))
                } else if tasks.isEmpty {
                    CLIError.note("No tasks.")
                } else {
                    print(DaemonOutput.table(tasks))
                }
            }
        }
    }

    struct Pause: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
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

    /// `haul set`: change the daemon's limits live. (Not named `Set`, which would hide
    /// `Swift.Set` inside `HaulCommand`.)
    struct SetLimits: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "set",
            abstract: "Change the daemon's limits, live.",
            discussion: """
                Lowering --max-concurrent sends the most recently started downloads back to waiting \
                (keeping their data); raising it starts the oldest waiting ones. --limit-rate alone \
                limits all downloads together; with task ids, --session or --all it limits each of \
                those downloads. A rate of 0 removes the limit.

                \(Examples.block([
                    ("haul set --max-concurrent 2", "two at a time, from now"),
                    ("haul set --limit-rate 10M", "all downloads together at most 10 MiB/s"),
                    ("haul set --limit-rate 1M --session nightly", "each of a session's at most 1 MiB/s"),
                    ("haul set --give-up-after 6h", "keep trying failed downloads for 6 hours"),
                    ("haul set --lowest-speed-limit 1K", "break connections slower than 1 KiB/s for 30 s"),
                ]))
                """
        )

        @Option(name: [.customShort("j"), .customLong("max-concurrent")], help: "How many downloads run at once.")
        var maxConcurrent: Int?

        @Option(name: .customLong("max-per-host"), help: "How many downloads run at once against one host.")
        var maxPerHost: Int?

        @Option(
            name: .customLong("limit-rate"),
            help: "A speed limit such as 500K or 10M (bytes per second); 0 for none."
        )
        var limitRate: ByteCount?

        @Option(
            name: .customLong("give-up-after"),
            help:
                "How long a download keeps trying after failures that may pass (refused, reset, timeout, 5xx), e.g. 24h, 90m, 600s."
        )
        var giveUpAfter: SpokenDuration?

        @Option(
            name: .customLong("allow-metered"),
            help: "Whether downloads may use metered networks (mobile broadband): yes or no."
        )
        var allowMetered: YesNo?

        @Option(
            name: .customLong("metered-interfaces"),
            help: "The interfaces that are metered, as comma-separated names or patterns (default 'wwan*,ppp*')."
        )
        var meteredInterfaces: String?

        @Option(
            name: .customLong("lowest-speed-limit"),
            help:
                "Break a connection slower than this (e.g. 1K, bytes per second) for --lowest-speed-time and try it again; 0 for none. For downloads that start from now on."
        )
        var lowestSpeedLimit: ByteCount?

        @Option(
            name: .customLong("lowest-speed-time"),
            help: "Seconds a connection may stay under --lowest-speed-limit (1 to 86400)."
        )
        var lowestSpeedTime: Int64?

        @Argument(help: "Task ids (or unique prefixes) whose own rate limit to change.")
        var ids: [String] = []

        @Option(help: "Change the rate limit of every task of this session.")
        var session: String?

        @Flag(help: "Change the rate limit of every unfinished task.")
        var all = false

        func validate() throws {
            let selected = !ids.isEmpty || session != nil || all
            if selected, limitRate == nil { throw ValidationError("Tasks are named only with --limit-rate") }
            if [!ids.isEmpty, session != nil, all].filter({ $0 }).count > 1 {
                throw ValidationError("Give task ids, --session NAME, or --all")
            }
        }

        func run() async throws {
            try await withDaemon { client in
                if let limitRate, !ids.isEmpty || session != nil || all {
                    let selector: API.Selector =
                        if let session { .session(session) } else if all { .everything } else {
                            .tasks(try await TaskSelection.resolve(ids, client))
                        }
                    let changed = try await client.setRateLimit(limitRate.bytes == 0 ? nil : limitRate.bytes, selector)
                    let what = limitRate.bytes == 0 ? "no limit" : Format.speed(Double(limitRate.bytes))
                    CLIError.note("\(DaemonOutput.count(changed.count)) now at \(what).")
                    return
                }
                let unchanged =
                    maxConcurrent == nil && maxPerHost == nil && limitRate == nil && giveUpAfter == nil
                    && allowMetered == nil && meteredInterfaces == nil && lowestSpeedLimit == nil
                    && lowestSpeedTime == nil
                let settings =
                    unchanged
                    ? try await client.settings()
                    : try await client.update(
                        API.Settings(
                            maxConcurrentDownloads: maxConcurrent,
                            maxConnectionsPerHost: maxPerHost,
                            overallRateLimit: limitRate?.bytes,
                            giveUpAfter: giveUpAfter?.seconds,
                            allowMetered: allowMetered?.value,
                            meteredInterfaces: meteredInterfaces.map(ProxySettings.list),
                            lowestSpeedLimit: lowestSpeedLimit?.bytes,
                            lowestSpeedTime: lowestSpeedTime
                        )
                    )
                print("max-concurrent: \(settings.maxConcurrentDownloads ?? 0)")
                print("max-per-host: \(settings.maxConnectionsPerHost ?? 0)")
                let rate = settings.overallRateLimit ?? 0
                print("limit-rate: \(rate == 0 ? "none" : Format.speed(Double(rate)))")
                if let seconds = settings.giveUpAfter { print("give-up-after: \(SpokenDuration.text(seconds))") }
                if let allow = settings.allowMetered { print("allow-metered: \(allow ? "yes" : "no")") }
                if let patterns = settings.meteredInterfaces {
                    print("metered-interfaces: \(patterns.joined(separator: ","))")
                }
                if let floor = settings.lowestSpeedLimit {
                    let time = settings.lowestSpeedTime ?? 30
                    print("lowest-speed: \(floor == 0 ? "none" : "\(Format.speed(Double(floor))) for \(time) s")")
                }
            }
        }
    }

    /// `haul status`: the daemon's facts.
    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Show the daemon's state.",
            discussion: Examples.block([
                ("haul status", "limits, counts, the network"),
                ("haul status --json", "the same, for scripts"),
            ])
        )

        @Flag(help: "Print as JSON.")
        var json = false

        func run() async throws {
            try await withDaemon(autoStart: false) { client in
                let status = try await client.status()
                if json {
                    print(try DaemonOutput.json(status))
                    return
                }
                let counts = TaskState.allCases.compactMap { state in
                    status.tasks[state.rawValue].map { "\($0) \(state.rawValue)" }
                }
                print("pid:      \(status.pid)")
                print("uptime:   \(Format.duration(.seconds(Int64(status.uptimeSeconds))))")
                print("socket:   \(status.socket)")
                if let listen = status.listen {
                    print("tcp:      \(listen) (token in \(DaemonPaths(home: HaulHome(path: status.home)).token))")
                }
                print("store:    \(status.store)")
                print("tasks:    \(counts.isEmpty ? "none" : counts.joined(separator: ", "))")
                print(
                    "running:  \(status.running) of at most \(status.maxConcurrentDownloads), \(status.waiting) waiting"
                )
                print("speed:    \(Format.speed(status.bytesPerSecond))")
                if let network = status.network {
                    var line = "network:  "
                    if let interface = network.interface {
                        line += "default route via \(interface) (\(network.sourceAddress ?? "?"))"
                        line += network.usable ? "" : ", down"
                        line += network.metered ? ", metered" : ""
                    } else {
                        line += "no default route"
                    }
                    if network.waitingTasks > 0 { line += "; \(network.waitingTasks) waiting for it" }
                    print(line)
                    var metered = "metered:  \(network.allowMetered ? "allowed" : "not allowed")"
                    metered += " (interfaces \(network.meteredInterfaces.joined(separator: ","))"
                    if let system = network.meteredBySystem, !system.isEmpty {
                        metered += "; NetworkManager says \(system.joined(separator: ","))"
                    }
                    print(metered + ")")
                }
                if let fleet = status.fleet { print(DaemonOutput.fleet(fleet)) }
            }
        }
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
        var rows = [["NODE", "LEASES", "HEARTBEAT", "SPEED"]]
        for node in fleet.nodes {
            let beat = node.stoppedAt != nil ? "left" : "\(span(max(0, now.timeIntervalSince(node.heartbeatAt)))) ago"
            rows.append([
                node.name + (node.name == fleet.node ? " (this)" : ""), "\(node.leases)", beat,
                Format.speed(node.bytesPerSecond),
            ])
        }
        let widths = (0..<3).map { column in rows.map { $0[column].count }.max() ?? 0 }
        lines += rows.map { row in
            "  "
                + (0..<3).map { row[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }
                .joined(separator: "  ") + "  " + row[3]
        }
        return lines.joined(separator: "\n")
    }

    static func count(_ n: Int) -> String { n == 1 ? "1 task" : "\(n) tasks" }

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
            let id = String(task.id.uuidString.prefix(8)).lowercased()
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
                    "\(String(task.id.uuidString.prefix(8)).lowercased()): next try in \(Format.duration(wait)); last error: \(Redaction.text(task.errorMessage ?? "unknown"))"
                )
            }
            lines.append([
                String(task.id.uuidString.prefix(8)).lowercased(), state, done,
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
