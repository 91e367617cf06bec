import Foundation
import Haul
import HaulTestSupport
import Testing

/// `scripts/demo`, the first thing a newcomer runs, and `scripts/demo-mirrors`, run small
/// against the built `haul`: they must work at any machine speed (the first kills by
/// progress, not by time).
@Suite("scripts/demo", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct DemoScriptTests {
    static let repository = TestPaths.repository

    /// Runs `scripts/NAME` small against the built `haul`; its status and everything it printed.
    static func run(_ name: String) async throws -> (status: Int32, text: String) {
        var environment = ProcessInfo.processInfo.environment
        environment["HAUL_BIN"] = HaulProcess.executable
        environment["SIZE_MIB"] = "24"
        environment["RATE"] = String(4 << 20)
        let output = try TemporaryDirectory()
        let process = try ChildProcess(
            "/bin/bash",
            arguments: [repository.appendingPathComponent("scripts/\(name)").path],
            environment: environment,
            standardOutput: .file(output.file("log"), append: true),
            standardError: .file(output.file("log"), append: true)
        )
        let status = await process.exited().status
        return (status, (try? String(contentsOfFile: output.file("log"), encoding: .utf8)) ?? "")
    }

    @Test("the offline demo kills haul part-way, resumes, and prints OK", .enabled(if: ExternalServer.python != nil))
    func demoRunsSmall() async throws {
        let (status, text) = try await Self.run("demo")
        #expect(status == 0, "\(text)")
        #expect(text.contains("OK: the resumed file is byte-identical to the server's."), "\(text)")
        #expect(text.contains("resumed at"), "\(text)")
    }

    @Test(
        "the mirrors demo: a damaged mirror's piece is caught and fetched again, and it prints OK",
        .enabled(if: ExternalServer.python != nil)
    )
    func mirrorsDemoRunsSmall() async throws {
        let (status, text) = try await Self.run("demo-mirrors")
        #expect(status == 0, "\(text)")
        #expect(text.contains("OK: the damaged piece was caught and fetched again"), "\(text)")
        #expect(text.contains("piece did not match its hash"), "\(text)")
    }
}
