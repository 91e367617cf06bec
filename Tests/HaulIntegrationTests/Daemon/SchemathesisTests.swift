import Foundation
import HaulTestSupport
import Testing

@testable import Haul
@testable import HaulDaemon

/// schemathesis (PyPI), a fuzzer that reads an OpenAPI document, against a `haul daemon`
/// process: every operation but shutdown and the two endless event streams, with valid and
/// invalid requests, and every check it has — no 5xx, every status, content type, header
/// and body as the document says, invalid requests refused, 405s' Allow true — except
/// "a valid request is accepted", which cannot hold for values the schema cannot judge (a
/// URL that does not parse, a directory that is not there). The daemon and schemathesis run
/// in a network namespace with only loopback (Tests/openapi/schemathesis.sh): the downloads
/// schemathesis invents name any host, and none can be reached from there.
@Suite("schemathesis against the OpenAPI document", .serialized, .timeLimit(.minutes(10)))
struct SchemathesisTests {
    @Test("no 5xx and every answer as the document describes, over about 1,700 generated requests")
    func schemathesis() async throws {
        guard let python = TestPaths.python else {
            if ExternalServer.isCI {
                Issue.record("The test Python is not in .build/test-python (.ci/run installs it)")
            }
            return
        }
        let schemathesis = URL(fileURLWithPath: python).deletingLastPathComponent().appendingPathComponent(
            "schemathesis"
        )
        guard FileManager.default.isExecutableFile(atPath: schemathesis.path),
            let unshare = ExternalServer.findExecutable("unshare"), getuid() == 0
        else {
            if ExternalServer.isCI {
                Issue.record("schemathesis (.build/test-python), unshare and root are needed; .ci/run installs them")
            }
            return
        }
        let temp = try TemporaryDirectory()
        let document = try #require(EmbeddedAssets.file("openapi.json"))
        try Data(buffer: document.body).write(to: URL(fileURLWithPath: temp.file("openapi.json")))
        let script = TestPaths.file("Tests/openapi/schemathesis.sh")
        let (status, output) = try await Command.run(
            unshare,
            ["--net", "--", script, HaulProcess.executable, python, temp.path, temp.file("openapi.json")]
        )
        #expect(status == 0, "\(output.suffix(6000))")

        // The JUnit report: what ran, and that nothing failed.
        let reports = try FileManager.default.contentsOfDirectory(atPath: temp.file("report"))
        let junit = try #require(reports.first { $0.hasPrefix("junit") && $0.hasSuffix(".xml") })
        let xml = try String(contentsOfFile: temp.file("report") + "/" + junit, encoding: .utf8)
        let suite = try #require(xml.firstRange(of: "<testsuite ").map { xml[$0.lowerBound...].prefix { $0 != ">" } })
        func count(_ name: String) -> Int? {
            guard let range = suite.firstRange(of: " \(name)=\"") else { return nil }
            return Int(suite[range.upperBound...].prefix { $0 != "\"" })
        }
        #expect(count("failures") == 0, "\(suite)")
        #expect(count("errors") == 0, "\(suite)")
        // Every operation but the three left out, and the stateful run across them.
        #expect(count("tests") ?? 0 >= 16, "\(suite)")
        #expect(output.contains("passed"), "\(output.suffix(2000))")
        // Nothing it added was fetched: the namespace has no way out.
        #expect(try FileManager.default.contentsOfDirectory(atPath: temp.file("downloads")).isEmpty)
    }
}
