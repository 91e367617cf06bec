import Foundation
import HaulTestSupport
import Testing

@testable import Haul
@testable import HaulCLI

/// The exit status by class: every error code has its class, several failures share theirs
/// only when they agree, and `haul status` without a daemon says so with 8.
@Suite(.timeLimit(.minutes(10))) struct ExitStatusTests {
    /// Haul's, not Swift Testing's exit status.
    typealias ExitStatus = HaulCLI.ExitStatus

    @Test("each error code maps to its documented class")
    func classes() {
        let expected: [(HaulError.Code, ExitStatus)] = [
            (.invalidURL, .usage), (.unsupportedScheme, .usage), (.invalidArgument, .usage),
            (.destinationExists, .fileSystem), (.fileSystem, .fileSystem), (.diskFull, .fileSystem),
            (.store, .fileSystem),
            (.connection, .network), (.hostNotFound, .network), (.proxy, .network), (.invalidResponse, .network),
            (.representationChanged, .network), (.unsupportedRedirect, .network), (.tooManyRedirects, .network),
            (.tls, .tls), (.httpStatus, .httpStatus), (.checksumMismatch, .checksum),
            (.corruptResumeData, .failure), (.notFound, .failure), (.busy, .failure),
        ]
        for (code, status) in expected {
            #expect(ExitStatus(HaulError(code, "x")) == status, "\(code)")
        }
        #expect(ExitStatus.allCases.map(\.rawValue) == [0, 1, 2, 3, 4, 5, 6, 7, 8])
    }

    @Test("several failures: their class when they share one, else 1")
    func several() {
        let notFound = HaulError(.httpStatus, "404")
        let gone = HaulError(.httpStatus, "410")
        #expect(ExitStatus([notFound, gone]) == .httpStatus)
        #expect(ExitStatus([notFound, HaulError(.tls, "untrusted")]) == .failure)
        #expect(ExitStatus([]) == .failure)
    }

    @Test("no daemon running: haul status exits 8, and haul --help documents every status", .tags(.process))
    func noDaemon() async throws {
        let temp = try TemporaryDirectory()
        let status = try await HaulProcess.run(["status"], home: temp.file("home"))
        #expect(status.status == 8, "\(status.stderr)")
        #expect(status.stderr.contains("No Haul daemon is running"))
        let help = try await HaulProcess.run(["--help"], home: temp.file("home"))
        let text = help.stdout.replacingOccurrences(of: "\n", with: " ")
        for phrase in [
            "0 done", "3 local files", "4 network", "5 TLS", "6 an HTTP error", "7 a checksum", "8 the daemon",
        ] {
            #expect(text.contains(phrase), "\(phrase)")
        }
    }
}
