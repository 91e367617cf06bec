import Foundation
import Logging

/// Programs a ``DownloadManager`` runs when a download ends: `--on-complete` and
/// `--on-error`, as aria2's `--on-download-complete` and `--on-download-error`.
///
/// Each is one program — an absolute path, or a name looked up in `PATH` — run without a
/// shell, with three arguments: the task's id, the file's path (empty when no name was
/// chosen yet) and the URL (without credentials), and these variables:
///
/// | variable | value |
/// |---|---|
/// | `HAUL_EVENT` | `complete` or `error` |
/// | `HAUL_TASK_ID` | the task's id |
/// | `HAUL_PATH` | the file's path |
/// | `HAUL_URL` | the URL, without credentials |
/// | `HAUL_SESSION` | the task's session |
/// | `HAUL_BYTES` | (complete) the file's size |
/// | `HAUL_ERROR`, `HAUL_ERROR_CODE` | (error) the message, and its code (`httpStatus`, `connection`, …) |
///
/// A hook that cannot start, exits non-zero, is killed, or runs longer than
/// ``DownloadManager/hookTimeout`` (then it is stopped) is logged and reported as a
/// ``DownloadEvent/hookFinished(id:run:)`` event; it never changes how the download ended.
public struct Hooks: Codable, Sendable, Equatable {
    /// Run when a download's verified file is in place.
    public var onComplete: String?
    /// Run when a download has failed for good (not when it pauses, is cancelled, or waits
    /// to try again).
    public var onError: String?

    public init(onComplete: String? = nil, onError: String? = nil) {
        self.onComplete = onComplete
        self.onError = onError
    }

    /// No hooks.
    public static let none = Hooks()

    /// When a hook runs.
    public enum Moment: String, Codable, Sendable {
        case complete
        case error
    }

    /// The program for `moment`.
    public func program(for moment: Moment) -> String? {
        switch moment {
        case .complete: onComplete
        case .error: onError
        }
    }

    /// These hooks, each one not set taken from `defaults` (a task's own win over a
    /// manager's).
    public func over(_ defaults: Hooks) -> Hooks {
        Hooks(onComplete: onComplete ?? defaults.onComplete, onError: onError ?? defaults.onError)
    }

    /// Checks what a stored hook must be, whatever the file system holds now: a program name
    /// or path, not empty, without NUL, shorter than 4 KiB.
    func validateShape() throws {
        for program in [onComplete, onError] {
            guard let program else { continue }
            guard !program.isEmpty, program.utf8.count < 4096, !program.utf8.contains(0) else {
                throw HaulError(.invalidArgument, "A hook must name a program")
            }
        }
    }

    /// Checks that each hook names a program that can be run now.
    /// - Throws: ``HaulError/Code/invalidArgument`` saying which hook and why.
    public func validate() throws {
        for (flag, program) in [("--on-complete", onComplete), ("--on-error", onError)] {
            guard let program else { continue }
            _ = try Hooks.resolve(program, flag: flag)
        }
    }

    /// The same hooks with each program as an absolute path, resolved in this process's
    /// `PATH`: what a daemon, whose `PATH` may differ, should run.
    public func resolved() throws -> Hooks {
        Hooks(
            onComplete: try onComplete.map { try Hooks.resolve($0, flag: "--on-complete") },
            onError: try onError.map { try Hooks.resolve($0, flag: "--on-error") }
        )
    }

    /// The executable `program` names: itself when it holds a `/`, else the first match in `PATH`.
    static func resolve(_ program: String, flag: String) throws -> String {
        guard !program.isEmpty, program.utf8.count < 4096, !program.utf8.contains(0) else {
            throw HaulError(.invalidArgument, "\(flag) needs a program")
        }
        func executable(_ path: String) -> Bool {
            FileOps.regularFile(path) != nil && access(path, X_OK) == 0
        }
        if program.contains("/") {
            let path = program.hasPrefix("/") ? program : FileManager.default.currentDirectoryPath + "/" + program
            guard executable(path) else {
                throw HaulError(
                    .invalidArgument,
                    "\(flag) \(program): no executable file there",
                    hint: "Give a program (it is run without a shell, with the id, path and URL as arguments)"
                )
            }
            return (path as NSString).standardizingPath
        }
        let search = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in search.split(separator: ":") where directory.hasPrefix("/") {
            let path = "\(directory)/\(program)"
            if executable(path) { return path }
        }
        throw HaulError(
            .invalidArgument,
            "\(flag) \(program): no such program in PATH",
            hint:
                "Give a program's path; it is run without a shell (for a command line, put it in a script), with the id, path and URL as arguments"
        )
    }
}

/// How a hook run ended.
public struct HookRun: Sendable, Equatable {
    public var moment: Hooks.Moment
    /// The program that was run.
    public var program: String
    /// Its exit status; nil when it did not start or was killed by a signal.
    public var exitStatus: Int32?
    /// Why it failed, in words; nil when it exited 0.
    public var failure: String?

    public var succeeded: Bool { failure == nil }
}

/// Runs one hook program to its end without blocking a thread.
enum HookRunner {
    /// Runs `program` with `arguments` and `variables` added to this process's environment;
    /// stops it (SIGTERM, then SIGKILL) after `timeout`.
    static func run(
        _ moment: Hooks.Moment,
        program: String,
        arguments: [String],
        variables: [String: String],
        timeout: Duration
    ) async -> HookRun {
        var run = HookRun(moment: moment, program: program)
        let child: ChildProcess
        do {
            // Its output goes to stderr: stdout may carry a command's own results (--json).
            child = try ChildProcess(
                program,
                arguments: arguments,
                environment: ProcessInfo.processInfo.environment.merging(variables) { $1 },
                standardInput: .null,
                standardOutput: .descriptor(STDERR_FILENO),
                standardError: .inherit
            )
        } catch {
            run.failure = "it could not be started (\(error))"
            return run
        }
        // A cancelled task (the manager stopping) asks the hook to stop; the limit stands.
        let ended = await withTaskCancellationHandler {
            await child.exited(within: timeout)
        } onCancel: {
            child.signal(SIGTERM)
        }
        guard let ended else {
            child.signal(SIGTERM)
            if await child.exited(within: .seconds(5)) == nil { child.signal(SIGKILL) }
            _ = await child.exited()
            run.failure = "it ran longer than \(timeout.spoken) and was stopped"
            return run
        }
        switch ended {
        case .signalled(let signal):
            run.failure = "it was killed by signal \(signal)"
        case .exited(let status):
            run.exitStatus = status
            if status != 0 { run.failure = "it exited with status \(status)" }
        }
        return run
    }
}
