import Foundation
import HaulTestSupport
import HaulTesting
import Synchronization
import Testing

@testable import Haul

/// `--on-complete` and `--on-error`: programs run when a download ends, as aria2's
/// `--on-download-complete` and `--on-download-error`.
@Suite("Hooks", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct HookTests {
    /// A hook that appends its arguments and HAUL_* variables to `$HOOK_OUT`, then exits
    /// `$HOOK_EXIT` (0 by default).
    static func writeHook(in temp: TemporaryDirectory, name: String = "hook.sh") throws -> String {
        let path = temp.file(name)
        try """
        #!/bin/sh
        { echo "run"; for a in "$@"; do echo "arg:$a"; done; env | grep '^HAUL_' | sort; } >> "$HOOK_OUT"
        exit ${HOOK_EXIT:-0}

        """.write(toFile: path, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: path)
        return path
    }

    static func lines(_ path: String) -> [String] {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test("--on-complete runs once, without a shell, with the id, path and URL and the HAUL_* variables")
    func onComplete() async throws {
        let temp = try TemporaryDirectory()
        let hook = try Self.writeHook(in: temp)
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 200_000))
            var parts = URLComponents(url: server.url("/a.bin"), resolvingAgainstBaseURL: false)!
            parts.user = "alice"
            parts.password = "s3cret"
            let result = try await HaulProcess.get(
                ["--on-complete", hook, parts.url!.absoluteString],
                in: temp,
                environment: ["HOOK_OUT": temp.file("out.txt")]
            )
            #expect(result.status == 0, "\(result.stderr)")
            let lines = Self.lines(temp.file("out.txt"))
            #expect(lines.filter { $0 == "run" }.count == 1, "\(lines)")
            let arguments = lines.filter { $0.hasPrefix("arg:") }.map { String($0.dropFirst(4)) }
            #expect(arguments.count == 3, "\(arguments)")
            #expect(UUID(uuidString: arguments.first ?? "") != nil)
            #expect(arguments.dropFirst().first == temp.file("a.bin"))
            #expect(arguments.last == server.url("/a.bin").absoluteString, "no credentials")
            #expect(lines.contains("HAUL_EVENT=complete"))
            #expect(lines.contains("HAUL_PATH=\(temp.file("a.bin"))"))
            #expect(lines.contains("HAUL_BYTES=200000"))
            #expect(lines.contains("HAUL_TASK_ID=\(arguments.first ?? "")"))
            #expect(!lines.joined().contains("s3cret"))
        }
    }

    @Test("a failing hook is reported and never fails the download; --on-error runs for a failure")
    func failingHookAndOnError() async throws {
        let temp = try TemporaryDirectory()
        let hook = try Self.writeHook(in: temp)
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 100_000))
            let failing = try await HaulProcess.get(
                ["--on-complete", hook, server.url("/a.bin").absoluteString],
                in: temp,
                environment: ["HOOK_OUT": temp.file("out.txt"), "HOOK_EXIT": "3"]
            )
            #expect(failing.status == 0, "\(failing.stderr)")
            #expect(
                failing.stderr.contains("a.bin: the --on-complete hook \(hook) failed: it exited with status 3"),
                "\(failing.stderr)"
            )
            #expect(sha256(file: temp.file("a.bin")) == server.sha256("/a.bin"))

            let missing = try await HaulProcess.get(
                ["--on-complete", hook, "--on-error", hook, "-o", "m.bin", server.url("/missing").absoluteString],
                in: temp,
                environment: ["HOOK_OUT": temp.file("error.txt")]
            )
            #expect(missing.status == 6, "the download's own status: \(missing.stderr)")
            let lines = Self.lines(temp.file("error.txt"))
            #expect(lines.filter { $0 == "run" }.count == 1, "only --on-error: \(lines)")
            #expect(lines.contains("HAUL_EVENT=error"))
            #expect(lines.contains("HAUL_ERROR_CODE=httpStatus"), "\(lines)")
            #expect(lines.contains { $0.hasPrefix("HAUL_ERROR=HTTP 404") }, "\(lines)")
        }
    }

    @Test(arguments: [
        (["--on-complete", "echo hi"], "--on-complete echo hi: no such program in PATH"),
        (["--on-error", "./not-there"], "--on-error ./not-there: no executable file there"),
    ])
    func notAProgram(flags: [String], message: String) async throws {
        let temp = try TemporaryDirectory()
        let result = try await HaulProcess.get(flags + ["http://127.0.0.1:1/x"], in: temp)
        #expect(result.status == 2)
        #expect(result.stderr.contains(message), "\(result.stderr)")
    }

    @Test("the daemon runs its --on-complete for every task, a task's own winning; each run is an event")
    func daemonHooks() async throws {
        let temp = try TemporaryDirectory()
        let global = try Self.writeHook(in: temp, name: "global.sh")
        let own = try Self.writeHook(in: temp, name: "own.sh")
        let home = temp.file("home")
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 100_000))
            server.set("/b.bin", .init(size: 100_000, seed: 2))
            let environment: [String: String?] = ["HOOK_OUT": temp.file("hooks.txt")]
            let started = try await HaulProcess(
                ["daemon", "--on-complete", global],
                home: home,
                environment: environment
            ).finish()
            #expect(started.status == 0, "\(started.stderr)")
            for (path, flags) in [("/a.bin", [String]()), ("/b.bin", ["--on-complete", own])] {
                let added = try await HaulProcess.run(
                    ["add", "-d", out] + flags + [server.url(path).absoluteString],
                    home: home
                )
                #expect(added.status == 0, "\(added.stderr)")
            }
            #expect(try await HaulProcess.run(["wait"], home: home).status == 0)
            // The hooks run beside the queue: wait for both to have written.
            #expect(try await waitUntil { Self.lines(temp.file("hooks.txt")).filter { $0 == "run" }.count == 2 })
            let lines = Self.lines(temp.file("hooks.txt"))
            #expect(lines.contains("HAUL_PATH=\(out)/a.bin") && lines.contains("HAUL_PATH=\(out)/b.bin"))
            // `haul events` acknowledges what it shows: gather what each call brings.
            var hooks: [Substring] = []
            #expect(
                try await waitUntil {
                    let events = try await HaulProcess.run(["events", "--json", "--no-follow"], home: home).stdout
                    hooks += events.split(separator: "\n").filter { $0.contains("\"event\":\"hook\"") }
                    return hooks.count >= 2
                }
            )
            #expect(hooks.count == 2, "one event per run: \(hooks)")
            #expect(
                hooks.contains { $0.contains("\"program\":\"\(global)\"") && $0.contains("\"exitStatus\":0") },
                "\(hooks)"
            )
            #expect(hooks.contains { $0.contains("\"program\":\"\(own)\"") }, "the task's own hook won: \(hooks)")
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }

    @Test("a hook that outlives its limit is stopped: SIGTERM, then SIGKILL when it ignores that")
    func outlivesItsLimit() async throws {
        let temp = try TemporaryDirectory()
        // Stops on SIGTERM: ended well before the 5 s grace.
        async let politeRun = HookRunner.run(
            .complete,
            program: "/bin/sh",
            arguments: ["-c", "echo $$ > \(temp.file("polite")); exec sleep 60"],
            variables: [:],
            timeout: .seconds(1)
        )
        // Ignores SIGTERM: killed after the grace.
        async let stubbornRun = HookRunner.run(
            .error,
            program: "/bin/sh",
            arguments: ["-c", "trap '' TERM; echo $$ > \(temp.file("stubborn")); while :; do sleep 1; done"],
            variables: [:],
            timeout: .seconds(1)
        )
        let (polite, stubborn) = await (politeRun, stubbornRun)
        #expect(polite.failure == "it ran longer than 1 s and was stopped")
        #expect(polite.exitStatus == nil)
        #expect(stubborn.failure == "it ran longer than 1 s and was stopped")
        for name in ["polite", "stubborn"] {
            let pid = try #require(
                Int32(
                    try String(contentsOfFile: temp.file(name), encoding: .utf8).trimmingCharacters(
                        in: .whitespacesAndNewlines
                    )
                )
            )
            #expect(kill(pid, 0) != 0, "the \(name) hook is gone")
        }
    }

    @Test("a task added again with a hook while it runs gets the hook at its end (the run began without one)")
    func hookAddedWhileRunning() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            // Held at 1 MiB until the hook is added: the task still runs when it is added again.
            server.set("/slow.bin", .init(size: 2 << 20, holdAt: 1 << 20))
            var configuration = DownloadManager.Configuration(
                downloader: testConfiguration(store: temp.file("s.sqlite"))
            )
            configuration.recoversTasks = false
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                let events = manager.events()
                var request = DownloadRequest(url: server.url("/slow.bin"), destination: .directory(temp.path))
                let info = try await manager.download(request)
                #expect(try await waitUntil { try await manager.info(info.id).state == .running })
                request.hooks = try Hooks(onComplete: "/bin/true").resolved()
                _ = try await manager.download(request)
                #expect(try await manager.info(info.id).state == .running)
                server.release("/slow.bin")
                let ran = Mutex<HookRun?>(nil)
                let consumer = Task {
                    for await event in events {
                        if case .hookFinished(let id, let run) = event, id == info.id {
                            ran.withLock { $0 = run }
                            return
                        }
                    }
                }
                defer { consumer.cancel() }
                #expect(try await waitUntil(timeout: .seconds(60)) { ran.withLock { $0 } != nil })
                #expect(ran.withLock { $0 }?.program == "/bin/true" && ran.withLock { $0 }?.failure == nil)
            }
        }
    }
}
