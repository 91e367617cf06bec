import CHaulSystem
import Foundation

/// A program Haul starts (a hook, the daemon; the tests' servers and `haul` runs): spawned
/// with posix_spawn, reaped by a thread of its own that waits for it, so nothing blocks
/// Swift's cooperative pool.
///
/// Haul does not use Foundation's `Process` on Linux: its `run()` reads `/proc/self/fd`
/// past the end of a buffer and crashes intermittently (swift-corelibs-foundation #5472,
/// fixed after Swift 6.3.1). Here the child closes every descriptor above 2 with
/// closefrom, in the C library.
package final class ChildProcess: @unchecked Sendable {
    /// How a child ended.
    package enum Termination: Sendable, Equatable {
        case exited(Int32)
        case signalled(Int32)

        /// The exit status, or the number of the signal that ended it (as Foundation's
        /// `terminationStatus`).
        package var status: Int32 {
            switch self {
            case .exited(let status), .signalled(let status): status
            }
        }

        /// As a shell reports it: the exit status, or 128 plus the signal.
        package var shellStatus: Int32 {
            switch self {
            case .exited(let status): status
            case .signalled(let signal): 128 + signal
            }
        }
    }

    /// Where one of the child's standard streams goes.
    package enum Stream: Sendable {
        /// This process's own.
        case inherit
        /// /dev/null.
        case null
        /// A descriptor the caller keeps open (and closes) itself.
        case descriptor(Int32)
        /// A file, created if missing; appended to when `append`, else truncated.
        case file(String, append: Bool = false)
        /// A file read from (standard input).
        case readFile(String)
    }

    package let pid: pid_t
    private let condition = NSCondition()
    private var ended: Termination?
    private var waiters: [Int: @Sendable (Termination?) -> Void] = [:]
    private var nextToken = 0

    /// Starts `executable` (a path) with `arguments`; `environment` nil inherits this
    /// process's. A child in `newSession` has no controlling terminal (the daemon); any
    /// other runs in a process group of its own.
    package init(
        _ executable: String,
        arguments: [String] = [],
        environment: [String: String]? = nil,
        directory: String? = nil,
        standardInput: Stream = .null,
        standardOutput: Stream = .inherit,
        standardError: Stream = .inherit,
        newSession: Bool = false
    ) throws {
        var opened: [Int32] = []
        defer { for descriptor in opened { _ = SystemCall.close(descriptor) } }
        func descriptor(_ stream: Stream, reading: Bool) throws -> Int32 {
            let path: String
            var flags = O_CLOEXEC
            switch stream {
            case .inherit: return -1
            case .descriptor(let descriptor): return descriptor
            case .null:
                path = "/dev/null"
                flags |= reading ? O_RDONLY : O_WRONLY
            case .file(let file, let append):
                path = file
                flags |= O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC)
            case .readFile(let file):
                path = file
                flags |= O_RDONLY
            }
            let descriptor = SystemCall.open(path, flags, 0o644)
            guard descriptor >= 0 else { throw ChildProcessError(program: executable, code: errno, about: path) }
            opened.append(descriptor)
            return descriptor
        }
        let input = try descriptor(standardInput, reading: true)
        let output = try descriptor(standardOutput, reading: false)
        let error = try descriptor(standardError, reading: false)
        let variables = (environment ?? ProcessInfo.processInfo.environment).map { "\($0.key)=\($0.value)" }
        var pid: pid_t = 0
        let result = try Self.withCStrings([executable] + arguments) { argv in
            try Self.withCStrings(variables) { envp in
                chaul_spawn(&pid, executable, argv, envp, directory, input, output, error, newSession ? 1 : 0)
            }
        }
        guard result == 0 else { throw ChildProcessError(program: executable, code: result, about: nil) }
        self.pid = pid
        let thread = Thread { [self] in reap() }
        thread.name = "haul-reap-\(pid)"
        thread.start()
    }

    /// How it ended; nil while it runs.
    package var termination: Termination? {
        condition.lock()
        defer { condition.unlock() }
        return ended
    }

    package var isRunning: Bool { termination == nil }

    /// Sends `signal` unless it has ended (its pid could be another's by then).
    package func signal(_ signal: Int32) {
        condition.lock()
        defer { condition.unlock() }
        if ended == nil { _ = kill(pid, signal) }
    }

    /// Waits for its end without blocking a thread.
    package func exited() async -> Termination {
        await withCheckedContinuation { continuation in
            wait { continuation.resume(returning: $0!) }
        }
    }

    /// Waits for its end, at most `limit`; nil when it still runs then. Cancelling the task
    /// does not end the wait early: the caller decides what a cancelled wait does to the child.
    package func exited(within limit: Duration) async -> Termination? {
        await withCheckedContinuation { continuation in
            let token = wait { continuation.resume(returning: $0) }
            guard let token else { return }
            let (seconds, attoseconds) = limit.components
            let nanoseconds = Int(clamping: seconds) &* 1_000_000_000 &+ Int(attoseconds / 1_000_000_000)
            DispatchQueue.global().asyncAfter(deadline: .now() + .nanoseconds(max(nanoseconds, 0))) {
                self.condition.lock()
                let waiter = self.waiters.removeValue(forKey: token)
                self.condition.unlock()
                waiter?(nil)
            }
        }
    }

    /// Calls `resume` with the termination once it has ended (at once if it has); returns the
    /// token of a waiter left waiting, nil when `resume` was called.
    @discardableResult
    private func wait(_ resume: @escaping @Sendable (Termination?) -> Void) -> Int? {
        condition.lock()
        if let ended {
            condition.unlock()
            resume(ended)
            return nil
        }
        nextToken += 1
        let token = nextToken
        waiters[token] = resume
        condition.unlock()
        return token
    }

    /// Blocks this thread until it ends: for code that cannot wait asynchronously.
    @discardableResult
    package func waitUntilExit() -> Termination {
        condition.lock()
        defer { condition.unlock() }
        while ended == nil { condition.wait() }
        return ended!
    }

    /// On its own thread: waits until the child ends, then reaps it and wakes every waiter.
    /// It is reaped under the lock `signal` takes, so a signal never reaches another
    /// process that was given its pid.
    private func reap() {
        var information = siginfo_t()
        while waitid(P_PID, id_t(pid), &information, WEXITED | WNOWAIT) < 0 && errno == EINTR {}
        condition.lock()
        var status: Int32 = 0
        var result: pid_t
        repeat { result = waitpid(pid, &status, 0) } while result < 0 && errno == EINTR
        let termination: Termination
        if result < 0 {
            termination = .exited(-1)
        } else if status & 0x7f == 0 {
            termination = .exited((status >> 8) & 0xff)
        } else {
            termination = .signalled(status & 0x7f)
        }
        ended = termination
        let woken = waiters.values
        waiters = [:]
        condition.broadcast()
        condition.unlock()
        for waiter in woken { waiter(termination) }
    }

    private static func withCStrings<Result>(
        _ strings: [String],
        _ body: ([UnsafeMutablePointer<CChar>?]) throws -> Result
    ) throws -> Result {
        guard !strings.contains(where: { $0.utf8.contains(0) }) else {
            throw ChildProcessError(program: strings.first ?? "", code: EINVAL, about: nil)
        }
        let pointers = strings.map { strdup($0) }
        defer { for pointer in pointers { free(pointer) } }
        return try body(pointers + [nil])
    }
}

/// A program that could not be started, in words.
package struct ChildProcessError: Error, CustomStringConvertible {
    package var program: String
    package var code: Int32
    package var about: String?

    package var description: String {
        let reason = String(cString: strerror(code)).lowercased()
        if let about { return "\(about): \(reason)" }
        return "\(program): \(reason)"
    }
}
