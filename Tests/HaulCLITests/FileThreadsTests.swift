import Foundation
import HaulTestSupport
import HaulTesting
import Testing

/// `haul get` starts as many threads for blocking file work as its downloads can use at once
/// (at least four), not the sixteen a daemon keeps: a small download starts faster and keeps
/// less memory.
@Suite("haul get's file threads", .tags(.process), .timeLimit(.minutes(5)))
struct FileThreadsTests {
    @Test(
        "one file over one connection: four threads; three files, -j 8 -x 4: twelve; -j 2 -x 16: sixteen",
        arguments: [(["-x", "1"], 1, 4), (["-j", "8", "-x", "4"], 3, 12), (["-j", "2", "-x", "16"], 3, 16)]
    )
    func threads(options: [String], files: Int, expected: Int) async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            let paths = (0..<files).map { "/f\($0)" }
            for (index, path) in paths.enumerated() {
                server.set(path, .init(size: 8 << 20, seed: UInt64(index + 1), bytesPerSecond: 256 << 10))
            }
            let child = try HaulProcess(
                ["get", "-q"] + options + paths.map { server.url($0).absoluteString },
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(try await waitUntil { server.bodyBytesSent(paths[0]) > 100_000 })
            let tasks = "/proc/\(child.pid)/task"
            let names = try FileManager.default.contentsOfDirectory(atPath: tasks).compactMap {
                try? String(contentsOfFile: "\(tasks)/\($0)/comm", encoding: .utf8)
            }
            child.kill(SIGKILL)
            _ = await child.finish()
            // NIO names its pools' threads "TP-#n"; its own shared pool's are "SGLTN-TP-#n".
            #expect(names.filter { $0.hasPrefix("TP-#") }.count == expected, "\(names)")
        }
    }
}
