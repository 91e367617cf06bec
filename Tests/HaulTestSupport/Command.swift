import Foundation
import Haul
import Testing

/// Runs a program to its end without blocking a thread (the exit arrives from the child's
/// reaping thread), returning its status and what it printed on stdout and stderr.
package enum Command {
    @discardableResult
    package static func run(
        _ executable: String,
        _ arguments: [String],
        in directory: String? = nil
    ) async throws -> (status: Int32, output: String) {
        let output = try TemporaryDirectory()
        _ = FileManager.default.createFile(atPath: output.file("out"), contents: nil)
        let process = try ChildProcess(
            executable,
            arguments: arguments,
            directory: directory,
            standardOutput: .file(output.file("out"), append: true),
            standardError: .file(output.file("out"), append: true)
        )
        let status = await process.exited().status
        return (status, (try? String(contentsOfFile: output.file("out"), encoding: .utf8)) ?? "")
    }
}
