import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// The daemon keeps trying what could still succeed: a task whose server refuses
/// connections waits in `retrying` and completes once the server is back, with nobody
/// running `haul resume`; it fails only after `--give-up-after`.
@Suite("The daemon keeps trying", .serialized, .tags(.process, .slow), .leftOutOfFastLoop, .timeLimit(.minutes(20)))
struct KeepTryingTests {
    /// A daemon whose runs retry nothing themselves and whose tries come every 0.5–1 s.
    static func startDaemon(home: String) async throws {
        let started = try await HaulProcess.run(
            ["daemon", "--retries", "0", "--retry-first-delay", "0.5", "--retry-max-delay", "1"],
            home: home
        )
        #expect(started.status == 0, "\(started.stderr)")
    }

    @Test(
        "a server down, then up: the task waits in retrying, showing its next try and error, outlives a daemon restart, and completes by itself"
    )
    func serverComesBack() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let out = try temp.directory("out")
        // Held (bound, not listening: connections are refused) until the server comes back,
        // so no other test's socket takes the port meanwhile.
        let (reserved, port) = try LoopbackPort.bound()
        var reservation: Int32? = reserved
        defer { if let reservation { close(reservation) } }
        try await Self.startDaemon(home: home)
        let client = HaulClient(home: HaulHome(path: home))
        defer { Task { try? await client.shutdown() } }
        let added = try await HaulProcess.run(
            ["add", "--session", "s", "-d", out, "http://127.0.0.1:\(port)/f.bin"],
            home: home
        )
        #expect(added.status == 0, "\(added.stderr)")
        // Tried and waiting again, several times over.
        #expect(
            try await waitUntil(timeout: .seconds(60)) {
                try await client.loggedEvents(session: "s").filter { $0.kind == .state && $0.to == .retrying }.count
                    >= 3
            }
        )
        // A try comes every 0.5–1 s: a listing may catch the task running; one that catches it waiting shows both.
        var listed = ""
        #expect(
            try await waitUntil {
                listed = try await HaulProcess.run(["list"], home: home).stdout
                return listed.contains("retrying in")
            },
            "\(listed)"
        )
        #expect(listed.contains("last error: Connection refused by 127.0.0.1:\(port)"), "\(listed)")
        let info = try #require(try await client.tasks().first)
        #expect(info.state == .retrying || info.state == .queued || info.state == .running)

        // The daemon stops while the task waits; the store keeps it retrying, with its next try.
        #expect(try await waitUntil { try await client.tasks().first?.state == .retrying })
        let stopped = try await HaulProcess.run(["daemon", "stop"], home: home)
        #expect(stopped.status == 0, "\(stopped.stderr)")
        let kept = try await Store(path: home + "/haul.sqlite").infos()
        #expect(kept.first?.state == .retrying || kept.first?.state == .queued, "\(kept)")

        // The server comes back on the same port, listening on the very socket that held it;
        // `haul wait` starts the daemon again.
        let server = try await TestServer.start(boundSocket: reserved)
        reservation = nil  // The server's now.
        server.set("/f.bin", .init(size: 500_000, seed: 12))
        let waited = try await HaulProcess.run(["wait", "--session", "s"], home: home)
        #expect(waited.status == 0, "\(waited.stderr)")
        #expect(sha256(file: out + "/f.bin") == server.sha256("/f.bin"))
        let states = try await client.loggedEvents(session: "s").filter { $0.kind == .state }.compactMap(\.to)
        #expect(!states.contains(.failed))
        #expect(states.last == .completed)
        // Each try: running, then retrying, then queued again, until the one that completes.
        let pattern = states.split(separator: .completed).first.map(Array.init) ?? []
        for (index, state) in pattern.enumerated().dropFirst() {
            let previous = pattern[index - 1]
            // The daemon's stop may catch a try running: that one goes back to queued.
            let allowed: [API.TaskState: Set<API.TaskState>] = [
                .running: [.queued], .retrying: [.running], .queued: [.retrying, .running],
            ]
            #expect(allowed[state]?.contains(previous) == true, "\(previous) → \(state) in \(states)")
        }
        _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        await server.shutdown()
    }

    @Test(
        "haul daemon --timeout applies to its downloads: a silent server's task waits to try again after 1 s, saying so"
    )
    func daemonTimeout() async throws {
        let silent = try FaultyListener(.silent)
        defer { silent.stop() }
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let started = try await HaulProcess.run(["daemon", "--retries", "0", "--timeout", "1"], home: home)
        #expect(started.status == 0, "\(started.stderr)")
        let client = HaulClient(home: HaulHome(path: home))
        let added = try await HaulProcess.run(
            ["add", "-d", try temp.directory("out"), "http://127.0.0.1:\(silent.port)/f.bin"],
            home: home
        )
        #expect(added.status == 0, "\(added.stderr)")
        // Well before the default 60 s.
        #expect(try await waitUntil(timeout: .seconds(30)) { try await client.tasks().first?.state == .retrying })
        let info = try #require(try await client.tasks().first)
        #expect(
            info.errorMessage?.contains("Timed out: 127.0.0.1:\(silent.port) sent nothing for 1 s") == true,
            "\(info.errorMessage ?? "")"
        )
        _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        try await client.shutdown()
    }

    @Test("--give-up-after: a task still failing after it fails, with the error; the setting is kept")
    func givesUp() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let out = try temp.directory("out")
        // Held (bound, not listening: connections are refused), so no other test takes it.
        let (reserved, port) = try LoopbackPort.bound()
        defer { close(reserved) }
        try await Self.startDaemon(home: home)
        let set = try await HaulProcess.run(["set", "--give-up-after", "3s"], home: home)
        #expect(set.status == 0, "\(set.stderr)")
        #expect(set.stdout.contains("give-up-after: 3s"), "\(set.stdout)")
        let started = ContinuousClock.now
        let added = try await HaulProcess.run(["add", "-d", out, "http://127.0.0.1:\(port)/f.bin"], home: home)
        #expect(added.status == 0, "\(added.stderr)")
        let waited = try await HaulProcess.run(["wait"], home: home)
        #expect(waited.status == 4, "the network's class, as haul get would exit: \(waited.stderr)")
        #expect(ContinuousClock.now - started >= .seconds(3))
        let listed = try await HaulProcess.run(["list", "--json"], home: home)
        #expect(listed.stdout.contains("\"state\" : \"failed\""), "\(listed.stdout)")
        #expect(listed.stdout.contains("\"errorCode\" : \"connection\""), "\(listed.stdout)")
        #expect(listed.stdout.contains("Connection refused by 127.0.0.1:\(port)"), "\(listed.stdout)")
        // The way on is named for a daemon's task: haul resume, not running a command again.
        let failed = try #require(try await Store(path: home + "/haul.sqlite").infos().first)
        let message = failed.errorMessage ?? ""
        #expect(
            message.contains("resume it with 'haul resume \(failed.id.uuidString.prefix(8).lowercased())'"),
            "\(message)"
        )
        #expect(!message.contains("run the same command again"), "\(message)")
        // Kept across a restart.
        _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        let shown = try await HaulProcess.run(["set"], home: home)
        #expect(shown.stdout.contains("give-up-after: 3s"), "\(shown.stdout)")
        _ = try await HaulProcess.run(["daemon", "stop"], home: home)
    }
}

/// The backoff between tries, on its own.
@Suite("Keep-trying backoff", .timeLimit(.minutes(10)))
struct KeepTryingBackoffTests {
    @Test("doubling from 30 s to at most 10 minutes, jitter taking at most a quarter off")
    func backoff() {
        let policy = KeepTrying()
        #expect(policy.delay(attempt: 1, random: 0) == .seconds(30))
        #expect(policy.delay(attempt: 2, random: 0) == .seconds(60))
        #expect(policy.delay(attempt: 5, random: 0) == .seconds(480))
        #expect(policy.delay(attempt: 6, random: 0) == .seconds(600))
        #expect(policy.delay(attempt: 60, random: 0) == .seconds(600))
        #expect(policy.delay(attempt: 1, random: 1) == .milliseconds(22_500))
    }

    @Test("the state machine: retrying waits, then queues; pause, resume and cancel apply to it")
    func transitions() {
        #expect(TaskStateMachine.next(from: .running, on: .retryLater) == .retrying)
        #expect(TaskStateMachine.next(from: .retrying, on: .retryDue) == .queued)
        #expect(TaskStateMachine.next(from: .retrying, on: .pause) == .paused)
        #expect(TaskStateMachine.next(from: .retrying, on: .resume) == .queued)
        #expect(TaskStateMachine.next(from: .retrying, on: .cancel) == .cancelled)
        #expect(TaskStateMachine.next(from: .retrying, on: .start) == nil)
        #expect(TaskStateMachine.next(from: .queued, on: .retryLater) == nil)
    }
}

/// A retrying task as a restart finds it in the store.
@Suite("Keep-trying recovery", .timeLimit(.minutes(10)))
struct KeepTryingRecoveryTests {
    @Test(
        "a retrying task is recovered retrying with its next try kept, even one far in the future, and resumes at once by hand"
    )
    func recoveredRetrying() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        let store = try Store(path: path)
        let record = TaskRecord(
            id: UUID(),
            url: URL(string: "http://127.0.0.1:9/f.bin")!,
            destination: .directory(temp.path),
            explicitName: false,
            requestHeaders: [],
            checksum: nil,
            overwrite: false,
            now: Date()
        )
        try await store.insert(
            record,
            segments: [SegmentRecord(taskID: record.id, ordinal: 0, start: 0, end: nil, committed: 0)]
        )
        // A store edited by hand (or by a broken clock): a next try in the year 9999.
        try await store.setRetrying(
            record.id,
            error: "Connection refused",
            nextTryAt: Date(timeIntervalSince1970: 253_402_214_400),
            since: Date()
        )
        try store.closeDatabase()
        var configuration = DownloadManager.Configuration(store: .sqlite(at: path))
        configuration.keepsTrying = KeepTrying()
        try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
            let info = try await manager.info(record.id)
            #expect(info.state == .retrying)
            #expect(info.nextTryAt.map { $0 > Date().addingTimeInterval(86400) } == true)
            // Resuming it by hand takes it at once.
            let resumed = try await manager.resume(record.id)
            #expect(resumed.state == .queued || resumed.state == .running)
            try await manager.pause(record.id)
        }
    }
}
