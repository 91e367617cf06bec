import Foundation
import Haul
import HaulTestSupport
import Testing

/// The programs Haul starts (hooks, the daemon) and the tests' servers: started with
/// posix_spawn, seeing nothing of this process they were not given.
@Suite("Child processes", .tags(.process), .timeLimit(.minutes(10)))
struct ChildProcessTests {
    @Test("arguments, environment, directory and output reach the child; its status comes back")
    func runsAsAsked() async throws {
        let temp = try TemporaryDirectory()
        let child = try ChildProcess(
            "/bin/sh",
            arguments: ["-c", "pwd; printf '%s|' \"$1\" \"$HAUL_X\"; exit 7", "sh", "one two"],
            environment: ["HAUL_X": "x y", "PATH": "/usr/bin:/bin"],
            directory: temp.path,
            standardOutput: .file(temp.file("out"))
        )
        #expect(await child.exited() == .exited(7))
        #expect(!child.isRunning)
        let output = try String(contentsOfFile: temp.file("out"), encoding: .utf8)
        #expect(output == "\(temp.path)\none two|x y|")
    }

    @Test("a descriptor this process left open (no close-on-exec) is closed in the child")
    func descriptorsDoNotLeak() async throws {
        let temp = try TemporaryDirectory()
        _ = FileManager.default.createFile(atPath: temp.file("secret"), contents: Data("s".utf8))
        let leaky = open(temp.file("secret"), O_RDONLY)
        try #require(leaky > 2)
        defer { close(leaky) }
        let child = try ChildProcess("/bin/sh", arguments: ["-c", "test -e /proc/self/fd/\(leaky)"])
        #expect(await child.exited() == .exited(1))
        // The same check sees a descriptor it was given.
        let given = try ChildProcess(
            "/bin/sh",
            arguments: ["-c", "test -e /proc/self/fd/0"],
            standardInput: .descriptor(leaky)
        )
        #expect(await given.exited() == .exited(0))
    }

    @Test("signals this process ignores (SIGPIPE, as NIO sets it) have their default action in the child")
    func signalsAreReset() async throws {
        signal(SIGPIPE, SIG_IGN)
        let child = try ChildProcess("/bin/sh", arguments: ["-c", "kill -PIPE $$; exit 0"])
        #expect(await child.exited() == .signalled(SIGPIPE))
        #expect(await child.exited().shellStatus == 128 + SIGPIPE)
    }

    @Test("a bounded wait gives up while it runs; a signal ends it, and every waiter hears the same end")
    func boundedWaitAndSignal() async throws {
        let child = try ChildProcess("/bin/sleep", arguments: ["60"])
        #expect(await child.exited(within: .milliseconds(100)) == nil)
        #expect(child.isRunning)
        async let first = child.exited()
        async let second = child.exited(within: .seconds(600))
        child.signal(SIGKILL)
        #expect(await first == .signalled(SIGKILL))
        #expect(await second == .signalled(SIGKILL))
        #expect(child.waitUntilExit() == .signalled(SIGKILL))
        // Once it has ended a signal goes nowhere: its pid may be another process's by now.
        child.signal(SIGKILL)
    }

    @Test("200 children at once, with hundreds of descriptors open: each starts and ends once")
    func manyAtOnce() async throws {
        let temp = try TemporaryDirectory()
        _ = FileManager.default.createFile(atPath: temp.file("f"), contents: nil)
        let descriptors = (0..<300).map { _ in open(temp.file("f"), O_RDONLY | O_CLOEXEC) }
        defer { for descriptor in descriptors { close(descriptor) } }
        let statuses = try await withThrowingTaskGroup(of: ChildProcess.Termination.self) { group in
            for index in 0..<200 {
                group.addTask {
                    try await ChildProcess("/bin/sh", arguments: ["-c", "exit \(index % 50)"]).exited()
                }
            }
            return try await group.reduce(into: [ChildProcess.Termination]()) { $0.append($1) }
        }
        #expect(statuses.count == 200)
        #expect(
            statuses.map(\.status).sorted() == (0..<200).map { Int32($0 % 50) }.sorted()
        )
    }

    @Test("a program that cannot be started is one sentence naming it")
    func missingProgram() throws {
        #expect {
            _ = try ChildProcess("/nonexistent/haul-hook")
        } throws: { error in
            "\(error)" == "/nonexistent/haul-hook: no such file or directory"
        }
        #expect {
            _ = try ChildProcess("/bin/sh", standardOutput: .file("/nonexistent/dir/out"))
        } throws: { error in
            "\(error)" == "/nonexistent/dir/out: no such file or directory"
        }
    }
}
