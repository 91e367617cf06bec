import Foundation
import Testing

/// Runs a program to its end without blocking a thread (the exit arrives through the
/// termination handler), returning its status and what it printed on stdout and stderr.
enum Command {
    @discardableResult
    static func run(
        _ executable: String,
        _ arguments: [String],
        in directory: String? = nil
    ) async throws -> (status: Int32, output: String) {
        let output = try TemporaryDirectory()
        _ = FileManager.default.createFile(atPath: output.file("out"), contents: nil)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        process.standardOutput = FileHandle(forWritingAtPath: output.file("out"))
        process.standardError = process.standardOutput
        let (ended, continuation) = AsyncStream<Int32>.makeStream()
        process.terminationHandler = {
            continuation.yield($0.terminationStatus)
            continuation.finish()
        }
        try process.run()
        var status: Int32 = -1
        for await code in ended { status = code }
        return (status, (try? String(contentsOfFile: output.file("out"), encoding: .utf8)) ?? "")
    }
}
