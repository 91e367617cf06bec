import AsyncHTTPClient
import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import NIOCore
import NIOFoundationCompat
import Testing

@testable import Haul
@testable import HaulDaemon

/// `GET /metrics` in Prometheus's text format, read by Prometheus's own Python parser
/// (`prometheus_client`, from PyPI) after downloads that completed, retried and failed.
@Suite("Daemon metrics", .serialized, .postgresServer, .timeLimit(.minutes(10)))
struct MetricsTests {
    /// The samples of every family, as prometheus_client parsed them: name → [(labels, value)].
    typealias Samples = [String: [(labels: [String: String], value: Double)]]

    static func parse(_ text: String, python: String) async throws -> Samples {
        let temp = try TemporaryDirectory()
        try text.write(toFile: temp.file("metrics.txt"), atomically: true, encoding: .utf8)
        let script = """
            import json, sys
            from prometheus_client.parser import text_string_to_metric_families
            out = []
            for family in text_string_to_metric_families(open(sys.argv[1]).read()):
                for s in family.samples:
                    out.append([s.name, s.labels, s.value])
            print(json.dumps(out))
            """
        let (status, output) = try await Command.run(python, ["-c", script, temp.file("metrics.txt")])
        #expect(status == 0, "\(output)")
        var samples: Samples = [:]
        let rows = try JSONSerialization.jsonObject(with: Data(output.utf8)) as? [[Any]] ?? []
        for row in rows {
            guard row.count == 3, let name = row[0] as? String, let labels = row[1] as? [String: String] else {
                continue
            }
            let value = (row[2] as? NSNumber)?.doubleValue ?? .nan
            samples[name, default: []].append((labels, value))
        }
        return samples
    }

    static func value(_ samples: Samples, _ name: String, _ labels: [String: String] = [:]) -> Double? {
        samples[name]?.first { sample in labels.allSatisfy { sample.labels[$0.key] == $0.value } }?.value
    }

    @Test(
        "after a download completed, one retried and one failed: the series Prometheus parses, with their counts",
        arguments: StoreEngine.allCases
    )
    func metricsAfterDownloads(engine: StoreEngine) async throws {
        guard let python = TestPaths.python else {
            if ExternalServer.isCI { Issue.record("prometheus_client is not installed in .build/test-python") }
            return
        }
        let temp = try TemporaryDirectory()
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            // Half a second at least: checkpoints (every 100 ms in these daemons) are made on the way.
            server.set("/ok.bin", .init(size: 3 << 20, seed: 21, bytesPerSecond: 6 << 20))
            server.set("/flaky.bin", .init(size: 1 << 20, seed: 22, failFirst: 1, failStatus: 503))
            try await withDaemon(on: engine, home: temp.file("home"), listen: ("127.0.0.1", 0)) { client, _ in
                let added = try await client.add([
                    DownloadRequest(url: server.url("/ok.bin"), destination: .directory(out)),
                    DownloadRequest(url: server.url("/flaky.bin"), destination: .directory(out)),
                    DownloadRequest(url: server.url("/missing.bin"), destination: .directory(out)),
                ])
                #expect(
                    try await waitUntil {
                        let states = try await added.asyncMap { try await client.info($0.id).state }
                        return states[0] == .completed && states[1] == .completed && states[2] == .failed
                    }
                )
                let listen = try #require(try await client.status().listen)
                let token = try String(
                    contentsOfFile: DaemonPaths(home: HaulHome(path: temp.file("home"))).token,
                    encoding: .utf8
                )
                .trimmingCharacters(in: .whitespacesAndNewlines)

                // On TCP, the token is required as for the rest of the API.
                let anonymous = try await HTTPClient.shared.execute(
                    HTTPClientRequest(url: "http://\(listen)/metrics"),
                    timeout: .seconds(30)
                )
                #expect(anonymous.status == .unauthorized)
                var request = HTTPClientRequest(url: "http://\(listen)/metrics")
                request.headers.add(name: "Authorization", value: "Bearer " + token)
                let response = try await HTTPClient.shared.execute(request, timeout: .seconds(30))
                #expect(response.status == .ok)
                #expect(response.headers["Content-Type"].first?.hasPrefix("text/plain; version=0.0.4") == true)
                let text = String(buffer: try await response.body.collect(upTo: 4 << 20))

                let samples = try await Self.parse(text, python: python)
                // Other daemons of this test process report into the same registry: at least.
                #expect(Self.value(samples, "haul_bytes_received_total") ?? 0 >= Double(4 << 20), "\(text)")
                #expect(Self.value(samples, "haul_downloads", ["state": "completed"]) == 2)
                #expect(Self.value(samples, "haul_downloads", ["state": "failed"]) == 1)
                #expect(Self.value(samples, "haul_downloads", ["state": "running"]) == 0)
                #expect(Self.value(samples, "haul_retries_total", ["class": "httpStatus"]) ?? 0 >= 1, "\(text)")
                #expect(Self.value(samples, "haul_failures_total", ["class": "httpStatus"]) ?? 0 >= 1, "\(text)")
                #expect(Self.value(samples, "haul_fsync_seconds_count") ?? 0 >= 2, "\(text)")
                #expect(Self.value(samples, "haul_checkpoint_seconds_count") ?? 0 >= 1, "\(text)")
                #expect(Self.value(samples, "haul_queue_wait_seconds_count") ?? 0 >= 3, "\(text)")
                #expect(Self.value(samples, "haul_running_connections") != nil, "\(text)")
                #expect(Self.value(samples, "haul_download_speed_bytes") != nil, "\(text)")
                // On PostgreSQL, a fleet of one: its node, labelled by name, running with its -j.
                if engine == .postgres {
                    let node = ["node": "test"]
                    #expect(
                        Self.value(samples, "haul_fleet_node_state", node.merging(["state": "running"]) { $1 }) == 1
                    )
                    #expect(Self.value(samples, "haul_fleet_node_state", node.merging(["state": "left"]) { $1 }) == 0)
                    #expect(Self.value(samples, "haul_fleet_node_capacity", node) == 3, "\(text)")
                    #expect(Self.value(samples, "haul_fleet_node_leases", node) == 0, "\(text)")
                    #expect(Self.value(samples, "haul_fleet_node_heartbeat_age_seconds", node) ?? 99 < 30, "\(text)")
                }
            }
        }
    }
}

extension Array {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
