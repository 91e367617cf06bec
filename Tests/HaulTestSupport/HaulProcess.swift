import Foundation
import Haul
import Testing

/// Runs the `haul` executable built beside the tests, as a user would from a shell.
///
/// Nothing here blocks a thread: output goes to files and the exit arrives from the child's
/// own reaping thread, so the in-process test server keeps running on the same small
/// cooperative thread pool.
package final class HaulProcess: Sendable {
    private let process: ChildProcess
    private let outputDirectory: TemporaryDirectory

    /// The `haul` binary in the build directory that holds this test bundle.
    package static var executable: String {
        if let path = ProcessInfo.processInfo.environment["HAUL_EXECUTABLE"] { return path }
        let me =
            (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments[0]
        var directory = URL(fileURLWithPath: me).deletingLastPathComponent()
        // macOS runs tests from inside an .xctest bundle; climb out of it.
        while directory.path.contains(".xctest") { directory.deleteLastPathComponent() }
        return directory.appendingPathComponent("haul").path
    }

    /// - Parameters:
    ///   - stdout: where the child's stdout goes instead of a file this object reads back
    ///     (a pipe, `/dev/full`).
    ///   - stderr: the same for stderr.
    ///   - launcher: a command that runs `haul` with the arguments after it (`unshare …`).
    ///   - environment: variables set (a value) or removed (nil) on top of this process's.
    package init(
        _ arguments: [String],
        home: String,
        directory: String? = nil,
        input: String? = nil,
        stdout: FileHandle? = nil,
        stderr: FileHandle? = nil,
        launcher: [String] = [],
        environment changes: [String: String?] = [:]
    ) throws {
        let executable = launcher.first ?? HaulProcess.executable
        let allArguments =
            launcher.isEmpty ? arguments : Array(launcher.dropFirst()) + [HaulProcess.executable] + arguments
        var environment = ProcessInfo.processInfo.environment
        // No configuration file of the machine's applies: one under the test's home, if any.
        environment["HAUL_CONFIG"] = nil
        environment["XDG_CONFIG_HOME"] = home + "/config"
        for (name, value) in changes { environment[name] = value }
        environment["HAUL_HOME"] = home
        outputDirectory = try TemporaryDirectory()
        var standardInput = ChildProcess.Stream.null
        if let input {
            _ = FileManager.default.createFile(atPath: outputDirectory.file("stdin"), contents: Data(input.utf8))
            standardInput = .readFile(outputDirectory.file("stdin"))
        }
        process = try ChildProcess(
            executable,
            arguments: allArguments,
            environment: environment,
            directory: directory,
            standardInput: standardInput,
            standardOutput: stdout.map { .descriptor($0.fileDescriptor) } ?? .file(outputDirectory.file("stdout")),
            standardError: stderr.map { .descriptor($0.fileDescriptor) } ?? .file(outputDirectory.file("stderr"))
        )
    }

    package var pid: Int32 { process.pid }

    package func kill(_ signal: Int32) {
        process.signal(signal)
    }

    /// What it has printed on stderr so far.
    package var currentStderr: String {
        String(decoding: FileManager.default.contents(atPath: outputDirectory.file("stderr")) ?? Data(), as: UTF8.self)
    }

    /// What it has printed on stdout so far.
    package var currentStdout: String {
        String(decoding: FileManager.default.contents(atPath: outputDirectory.file("stdout")) ?? Data(), as: UTF8.self)
    }

    /// Waits for exit and returns the status and what was printed.
    package func finish() async -> (status: Int32, stdout: String, stderr: String) {
        output(await process.exited().status)
    }

    private func output(_ status: Int32) -> (status: Int32, stdout: String, stderr: String) {
        let stdout = FileManager.default.contents(atPath: outputDirectory.file("stdout")) ?? Data()
        let stderr = FileManager.default.contents(atPath: outputDirectory.file("stderr")) ?? Data()
        return (status, String(decoding: stdout, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
    }

    /// Waits for exit as ``finish()`` does, but at most `timeout`: a process still running
    /// then is killed (`SIGKILL`) and nil returned, so a wedged process fails a test
    /// instead of hanging the suite.
    package func finish(within timeout: Duration) async -> (status: Int32, stdout: String, stderr: String)? {
        let ended = await process.exited(within: timeout)
        if ended == nil {
            kill(SIGKILL)
            _ = await process.exited()
        }
        let status = ended?.status
        return status.map(output)
    }

    /// The variables that change how `haul` reaches servers: none of this machine's apply
    /// to a test unless it sets them.
    package static let networkVariables: [String: String?] = [
        "http_proxy": nil, "HTTP_PROXY": nil, "https_proxy": nil, "HTTPS_PROXY": nil, "all_proxy": nil,
        "ALL_PROXY": nil, "no_proxy": nil, "NO_PROXY": nil, "SSL_CERT_FILE": nil, "SSL_CERT_DIR": nil, "NETRC": nil,
    ]

    /// `haul get ARGUMENTS` in `temp` (its home `temp/home`) to the end, with the network
    /// variables of this machine cleared and `environment` set.
    package static func get(
        _ arguments: [String],
        in temp: TemporaryDirectory,
        environment: [String: String?] = [:]
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await HaulProcess(
            ["get"] + arguments,
            home: temp.file("home"),
            directory: temp.path,
            environment: networkVariables.merging(environment) { $1 }
        ).finish()
    }

    /// Runs `haul` to the end.
    package static func run(
        _ arguments: [String],
        home: String,
        directory: String? = nil,
        input: String? = nil
    ) async throws -> (status: Int32, stdout: String, stderr: String) {
        try await HaulProcess(arguments, home: home, directory: directory, input: input).finish()
    }
}
