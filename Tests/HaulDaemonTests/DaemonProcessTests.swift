import Foundation
import HaulClient
import HaulDaemon
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// The daemon as a separate `haul daemon` process: killed, stopped, restarted.
@Suite("Daemon process", .tags(.process, .slow), .leftOutOfFastLoop, .timeLimit(.minutes(20))) struct DaemonProcessTests
{
    @Test("kill -9 in the middle of a 10-file session, restart: every file completes once, with the right bytes")
    func killNineAndRestart() async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let home = temp.file("home")
        try await TestServer.withServer { server in
            for index in 0..<10 {
                // Held at 1 MB until the daemon is killed: a running one is still part-way at the
                // kill, however slow the machine.
                server.set("/f\(index)", .init(size: 2_000_000, seed: UInt64(index), holdAt: 1_000_000))
            }
            let urls = (0..<10).map { server.url("/f\($0)").absoluteString }
            // Started in the background by `haul daemon`, checkpointing often.
            let started = try await HaulProcess.run(["daemon", "--checkpoint-interval", "0.1"], home: home)
            #expect(started.status == 0, "\(started.stderr)")
            #expect(started.stderr.contains("Started the Haul daemon"))
            let added = try await HaulProcess.run(["add", "--session", "s", "-d", out] + urls, home: home)
            #expect(added.status == 0, "\(added.stderr)")
            let ids = added.stdout.split(separator: "\n").compactMap { UUID(uuidString: String($0)) }
            #expect(ids.count == 10)

            let client = HaulClient(home: HaulHome(path: home))
            defer { Task { try? await client.shutdown() } }
            // Wait until some data is committed, then kill the daemon outright.
            #expect(
                try await waitUntil {
                    try await client.tasks().contains { $0.state == .running && $0.bytesCommitted > 200_000 }
                }
            )
            let pid = try await client.status().pid
            #expect(kill(pid, SIGKILL) == 0)
            #expect(try await waitUntil { DaemonLock.holder(home + "/daemon.lock") == nil })
            let before = try await Store(path: home + "/haul.sqlite").infos()
            #expect(before.count == 10)
            #expect(before.contains { $0.state == .running }, "the killed daemon left running tasks")

            // Any command restarts it; `haul wait` blocks until all are done.
            server.release()
            let waited = try await HaulProcess.run(["wait", "--session", "s"], home: home)
            #expect(waited.status == 0, "\(waited.stderr)")
            let after = try await client.tasks(session: "s")
            #expect(
                after.map(\.id).sorted { $0.uuidString < $1.uuidString } == ids.sorted { $0.uuidString < $1.uuidString }
            )
            #expect(after.allSatisfy { $0.state == .completed })
            for index in 0..<10 { #expect(sha256(file: out + "/f\(index)") == server.sha256("/f\(index)")) }
            // Resumed, not restarted: some request asked for a range.
            let ranged = (0..<10).flatMap { server.requests(for: "/f\($0)") }.compactMap { $0.header("Range") }
            #expect(!ranged.isEmpty)
            // Every completion was logged once.
            let completions = try await client.loggedEvents(session: "s").filter { $0.kind == .completed }
            #expect(completions.count == 10)
            #expect(Set(completions.map(\.taskID)).count == 10)

            let stopped = try await HaulProcess.run(["daemon", "stop"], home: home)
            #expect(stopped.status == 0, "\(stopped.stderr)")
            #expect(DaemonLock.holder(home + "/daemon.lock") == nil)
        }
    }

    @Test("SIGTERM: a clean stop with checkpoints; the next start resumes")
    func sigtermCheckpoints() async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let home = temp.file("home")
        try await TestServer.withServer { server in
            // Held a third of the way in until the stop is over: it cannot finish before the
            // stop, however loaded the machine (throttled to 20 s, a loaded run once saw it
            // complete first).
            server.set("/big", .init(size: 6_000_000, seed: 3, holdAt: 2_000_000))
            let daemon = try HaulProcess(["daemon", "--foreground", "--checkpoint-interval", "10"], home: home)
            let client = HaulClient(home: HaulHome(path: home))
            defer { Task { try? await client.shutdown() } }
            #expect(try await waitUntil { (try? await client.status(timeout: .seconds(1))) != nil })
            let task = try await client.add([DownloadRequest(url: server.url("/big"), destination: .directory(out))])[0]
            // Stop once the daemon reports a megabyte received (not after a fixed time: on a
            // loaded machine the transfer may start late).
            for try await event in client.liveEvents() where event.taskID == task.id && event.kind == .progress {
                if (event.received ?? 0) >= 1_000_000 { break }
            }
            daemon.kill(SIGTERM)
            let result = await daemon.finish()
            #expect(result.status == 0, "\(result.stderr)")
            // The checkpoint interval is 10 s: only the stop's own checkpoint can have recorded progress.
            let stored = try #require(try await Store(path: home + "/haul.sqlite").infos().first)
            #expect(stored.state == .queued)
            #expect(stored.bytesCommitted > 500_000)
            server.release("/big")

            let again = try HaulProcess(["daemon", "--foreground"], home: home)
            #expect(
                try await waitUntil(timeout: .seconds(30)) { (try? await client.info(task.id).state) == .completed }
            )
            #expect(sha256(file: out + "/big") == server.sha256("/big"))
            let range = server.requests(for: "/big").last?.header("Range")
            #expect(range == resumeRange(from: stored.bytesCommitted))
            again.kill(SIGTERM)
            #expect(await again.finish().status == 0)
        }
    }

    @Test("a client attached with pause-on-exit is killed: its session's tasks pause, others go on")
    func pauseOnDisconnect() async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let home = temp.file("home")
        try await TestServer.withServer { server in
            server.set("/mine", .init(size: 8_000_000, seed: 1, bytesPerSecond: 500_000))
            server.set("/theirs", .init(size: 8_000_000, seed: 2, bytesPerSecond: 500_000))
            let mine = try await HaulProcess.run(
                ["add", "--session", "app", "-d", out, server.url("/mine").absoluteString],
                home: home
            )
            #expect(mine.status == 0, "\(mine.stderr)")
            let theirs = try await HaulProcess.run(
                ["add", "-d", out, server.url("/theirs").absoluteString],
                home: home
            )
            #expect(theirs.status == 0, "\(theirs.stderr)")
            let client = HaulClient(home: HaulHome(path: home))
            defer { Task { try? await client.shutdown() } }

            let listener = try HaulProcess(["events", "--session", "app", "--pause-on-exit", "--json"], home: home)
            // Readiness: the daemon counts the listener's stream, and both tasks run.
            #expect(try await waitUntil { try await client.status().eventStreams >= 1 })
            #expect(try await waitUntil { try await client.tasks().allSatisfy { $0.state == .running } })
            listener.kill(SIGKILL)
            _ = await listener.finish()
            #expect(
                try await waitUntil(timeout: .seconds(10)) {
                    try await client.tasks(session: "app").first?.state == .paused
                }
            )
            #expect(try await client.tasks(session: "default").first?.state == .running)
            let paused = try #require(try await client.tasks(session: "app").first)
            #expect(paused.bytesCommitted > 0, "the paused task kept its data")
            // `haul get` works without the daemon, but does not take the daemon's download.
            let get = try await HaulProcess.run(["get", "-d", out, server.url("/mine").absoluteString], home: home)
            #expect(get.status == 1)
            #expect(
                get.stderr.contains("The Haul daemon already has this download (task \(paused.id.shown)"),
                "\(get.stderr)"
            )
            // The way out it names says what it costs.
            #expect(
                get.stderr.contains("drop it with 'haul remove \(paused.id.shown)' (its partial data is discarded)")
            )
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }

    @Test(
        "haul events --json prints followed events exactly as --no-follow does: one JSON line each, no progress, secrets hidden"
    )
    func followedEventsAsJSON() async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let home = temp.file("home")
        try await TestServer.withServer { server in
            let port = server.url("/").port!
            for index in 0..<3 { server.set("/e\(index)", .init(size: 200_000, seed: UInt64(index))) }
            let urls = (0..<3).map { "http://alice:SECRET@127.0.0.1:\(port)/e\($0)" }
            let client = HaulClient(home: HaulHome(path: home))
            defer { Task { try? await client.shutdown() } }
            let added = try await HaulProcess.run(["add", "--session", "j", "-d", out] + urls, home: home)
            #expect(added.status == 0, "\(added.stderr)")
            #expect(try await waitUntil { try await client.tasks(session: "j").allSatisfy { $0.state == .completed } })

            // Followed (the stream, printed as received) and not (read from the log and re-encoded).
            let follower = try HaulProcess(["events", "--session", "j", "--after", "0", "--json"], home: home)
            let logged = try await client.loggedEvents(session: "j", after: 0)
            #expect(try await waitUntil { try await client.status().eventStreams >= 1 })
            let listed = try await HaulProcess.run(
                ["events", "--session", "j", "--after", "0", "--no-follow", "--json"],
                home: home
            )
            #expect(listed.status == 0, "\(listed.stderr)")
            // The stream sends the logged events at once; stop it once the last has been printed.
            let lastID = try #require(logged.last?.eventID)
            #expect(try await waitUntil { follower.currentStdout.contains("\"eventID\":\(lastID)") })
            follower.kill(SIGINT)
            let followed = await follower.finish()

            let lines = followed.stdout.split(separator: "\n").map(String.init)
            #expect(
                lines == listed.stdout.split(separator: "\n").map(String.init),
                "\(followed.stdout)\n--\n\(listed.stdout)"
            )
            #expect(lines.count == logged.count)
            for line in lines {
                let record = try EventRecord(jsonLine: line)
                #expect(record.kind != .progress && record.session == "j")
            }
            #expect(lines.filter { $0.contains("\"event\":\"completed\"") }.count == 3)
            #expect(!followed.stdout.contains("SECRET") && followed.stdout.contains("alice:***@"))
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }

    @Test("the task commands print what they did: list, set, status, pause by id prefix, remove")
    func taskCommands() async throws {
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        let home = temp.file("home")
        try await TestServer.withServer { server in
            server.set("/slow", .init(size: 8_000_000, seed: 1, bytesPerSecond: 500_000))
            let added = try await HaulProcess.run(
                ["add", "--session", "cli", "-d", out, server.url("/slow").absoluteString],
                home: home
            )
            #expect(added.status == 0, "\(added.stderr)")
            let id = try #require(UUID(uuidString: added.stdout.trimmingCharacters(in: .whitespacesAndNewlines)))
            // The id as haul list shows its start: lower case (it printed it in upper case).
            #expect(added.stdout == id.uuidString.lowercased() + "\n")
            let prefix = String(id.uuidString.prefix(8)).lowercased()

            let set = try await HaulProcess.run(["set", "-j", "2"], home: home)
            #expect(
                set.stdout
                    == "max-concurrent: 2\nmax-per-host: 8\nmax-connections-per-host: 16\nlimit-rate: none\ngive-up-after: 1d\nallow-metered: yes\nmetered-interfaces: wwan*,ppp*\nlowest-speed: none\n",
                "\(set.stderr)"
            )
            let overall = try await HaulProcess.run(["set", "--limit-rate", "20M"], home: home)
            #expect(
                overall.stdout.contains("limit-rate: 20.0 MiB/s\ngive-up-after: 1d\n"),
                "\(overall.stdout)\(overall.stderr)"
            )
            let one = try await HaulProcess.run(["set", "--limit-rate", "500K", prefix], home: home)
            #expect(one.stderr == "1 task now at 500 KiB/s.\n", "\(one.stderr)")
            let bad = try await HaulProcess.run(["set", prefix], home: home)
            #expect(bad.status != 0 && bad.stderr.contains("only with --limit-rate"), "\(bad.stderr)")
            let status = try await HaulProcess.run(["status", "--json"], home: home)
            #expect(status.status == 0)
            #expect(status.stdout.contains("\"maxConcurrentDownloads\" : 2"), "\(status.stdout)")

            let paused = try await HaulProcess.run(["pause", prefix], home: home)
            #expect(paused.status == 0 && paused.stderr == "Paused 1 task.\n", "\(paused.stderr)")
            let again = try await HaulProcess.run(["pause", prefix], home: home)
            #expect(again.status == 0, "a second pause is no error")
            #expect(again.stderr == "Already paused: \(prefix).\n", "\(again.stderr)")
            let list = try await HaulProcess.run(["list", "--session", "cli"], home: home)
            let lines = list.stdout.split(separator: "\n")
            #expect(lines.first?.hasPrefix("ID ") == true)
            #expect(lines.count == 2 && lines[1].hasPrefix("\(prefix)  paused"), "\(list.stdout)")
            #expect(lines.last?.hasSuffix("slow") == true)

            let removed = try await HaulProcess.run(["remove", "--session", "cli"], home: home)
            #expect(removed.stderr == "Removed 1 task.\n", "\(removed.stderr)")
            #expect(!FileManager.default.fileExists(atPath: out + "/slow.part"))
            let empty = try await HaulProcess.run(["list"], home: home)
            #expect(empty.stderr == "No tasks.\n")
            let unknown = try await HaulProcess.run(["resume", "ffffffff"], home: home)
            #expect(unknown.status == 2 && unknown.stderr.contains("No task 'ffffffff'"), "\(unknown.stderr)")
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }
}
