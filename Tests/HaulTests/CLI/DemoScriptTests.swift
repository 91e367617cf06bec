import Foundation
import Testing

/// `scripts/demo`, the first thing a newcomer runs, run small against the built `haul`: it
/// must work at any machine speed (it kills by progress, not by time).
@Suite("scripts/demo", .tags(.process), .leftOutOfFastLoop)
struct DemoScriptTests {
    static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()

    @Test("the offline demo kills haul part-way, resumes, and prints OK", .enabled(if: ExternalServer.python != nil))
    func demoRunsSmall() async throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/bash")
        process.arguments = [Self.repository.appendingPathComponent("scripts/demo").path]
        var environment = ProcessInfo.processInfo.environment
        environment["HAUL_BIN"] = HaulProcess.executable
        environment["SIZE_MIB"] = "24"
        environment["RATE"] = String(4 << 20)
        process.environment = environment
        let output = try TemporaryDirectory()
        _ = FileManager.default.createFile(atPath: output.file("log"), contents: nil)
        let log = try #require(FileHandle(forWritingAtPath: output.file("log")))
        process.standardOutput = log
        process.standardError = log
        let (exit, continuation) = AsyncStream<Int32>.makeStream()
        process.terminationHandler = {
            continuation.yield($0.terminationStatus)
            continuation.finish()
        }
        try process.run()
        var status: Int32 = -1
        for await code in exit { status = code }
        let text = (try? String(contentsOfFile: output.file("log"), encoding: .utf8)) ?? ""
        #expect(status == 0, "\(text)")
        #expect(text.contains("OK: the resumed file is byte-identical to the server's."), "\(text)")
        #expect(text.contains("resumed at"), "\(text)")
    }
}
