import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// `haul get` with several files: the limit, input files, JSON events, the summary, and
/// rerunning an interrupted batch.
@Suite("haul get with several files", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct MultiFileTests {
    @Test func manyURLsWithALimit() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            for index in 0..<12 {
                server.set("/m\(index).bin", .init(size: 400_000, seed: UInt64(index), bytesPerSecond: 2 << 20))
            }
            let urls = (0..<12).map { server.url("/m\($0).bin").absoluteString }
            let result = try await HaulProcess.run(
                ["get", "-j", "4"] + urls,
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.contains("Done: 12 ok, 0 failed"))
            #expect(!result.stderr.contains("\u{1B}"))
            #expect(server.maxActiveResponses == 4)
            for index in 0..<12 {
                #expect(sha256(file: temp.file("m\(index).bin")) == server.sha256("/m\(index).bin"))
            }
        }
    }

    @Test func inputFileWithPerLineOptionsFromStdin() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a", .init(size: 50_000, seed: 1))
            server.set("/b", .init(size: 50_000, seed: 2))
            server.set("/c", .init(size: 50_000, seed: 3))
            let input = """
                # two good files, one with a wrong checksum
                \(server.url("/a"))
                  out=first.bin
                  checksum=sha256=\(server.sha256("/a"))

                \(server.url("/b"))
                  checksum=sha256=\(String(repeating: "0", count: 64))
                \(server.url("/c"))
                """
            let downloads = try temp.directory("downloads")
            let result = try await HaulProcess.run(
                ["get", "-d", downloads, "-i", "-"],
                home: temp.file("home"),
                directory: temp.path,
                input: input
            )
            #expect(result.status == 7)
            #expect(result.stderr.contains("Done: 2 ok, 1 failed"))
            let failed = result.stderr.split(separator: "\n").filter { $0.hasPrefix("haul: failed: ") }
            #expect(failed.count == 1 && failed[0].contains("Checksum mismatch"), "\(result.stderr)")
            #expect(failed.first?.components(separatedBy: server.url("/b").absoluteString).count == 2, "the URL once")
            #expect(sha256(file: downloads + "/first.bin") == server.sha256("/a"))
            #expect(sha256(file: downloads + "/c") == server.sha256("/c"))
            #expect(!FileManager.default.fileExists(atPath: downloads + "/b"))
        }
    }

    @Test("a file that fails is named once in the summary's failure line, and a 404 says nothing of resuming")
    func failureNamesTheURLOnce() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a", .init(size: 1_000, seed: 1))
            let missing = server.url("/missing.bin").absoluteString
            let result = try await HaulProcess.get(
                ["-d", temp.path, missing, server.url("/a").absoluteString],
                in: temp
            )
            #expect(result.status == 6, "\(result.stderr)")
            let failed = result.stderr.split(separator: "\n").filter { $0.hasPrefix("haul: failed: ") }
            #expect(failed.count == 1, "\(result.stderr)")
            #expect(failed.first?.components(separatedBy: missing).count == 2, "the URL twice: \(failed)")
            #expect(failed.first?.contains("404") == true)
            #expect(!result.stderr.contains("resume"), "nothing fetched, nothing to resume: \(result.stderr)")
        }
    }

    @Test func badInputFileLineIsAClearError() async throws {
        let temp = try TemporaryDirectory()
        let list = temp.file("list.txt")
        try "http://127.0.0.1:1/a\n  colour=blue\n".write(toFile: list, atomically: true, encoding: .utf8)
        let result = try await HaulProcess.run(["get", "-i", list], home: temp.file("home"), directory: temp.path)
        #expect(result.status == 2)
        #expect(result.stderr.hasPrefix("haul: error: \(list):2: unknown option 'colour'"))
    }

    @Test func jsonEvents() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/a", .init(size: 100_000, seed: 1))
            server.set("/b", .init(size: 100_000, seed: 2))
            let result = try await HaulProcess.run(
                ["get", "--json", server.url("/a").absoluteString, server.url("/b").absoluteString],
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(result.status == 0, "\(result.stderr)")
            struct Line: Decodable {
                var event: String
                var id: String
                var path: String?
            }
            let lines = try result.stdout.split(separator: "\n").map {
                try JSONDecoder().decode(Line.self, from: Data($0.utf8))
            }
            let completed = lines.filter { $0.event == "completed" }
            #expect(Set(completed.compactMap(\.path)) == [temp.file("a"), temp.file("b")])
            let perTask = Dictionary(grouping: lines, by: \.id)
            #expect(perTask.count == 2)
            for events in perTask.values {
                let names = events.map(\.event).filter { $0 != "progress" }
                #expect(names == ["added", "state", "state", "completed"], "\(result.stdout)")
            }
        }
    }

    @Test func interruptedBatchContinuesAndSkipsFinishedFiles() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            // Two small files finish at once; four large ones are still running or waiting at Ctrl-C.
            server.set("/s0", .init(size: 10_000, seed: 1))
            server.set("/s1", .init(size: 10_000, seed: 2))
            for index in 0..<4 {
                // Held at 1 MiB until the rerun: unfinished at the Ctrl-C, however slow the machine.
                server.set("/L\(index)", .init(size: 4 << 20, seed: UInt64(10 + index), holdAt: 1 << 20))
            }
            let urls = ["/s0", "/s1", "/L0", "/L1", "/L2", "/L3"].map { server.url($0).absoluteString }
            let child = try HaulProcess(["get", "-j", "2"] + urls, home: temp.file("home"), directory: temp.path)
            // Both large files under way have written to their part files (not only been sent bytes).
            #expect(
                try await waitUntil {
                    fileSize(temp.file("L0.part")) > 500_000 && fileSize(temp.file("L1.part")) > 500_000
                }
            )
            child.kill(SIGINT)
            let stopped = await child.finish()
            #expect(stopped.status == 130, "\(stopped.stderr)")
            #expect(stopped.stderr.contains("Stopped: 2 ok, 0 failed, 4 unfinished"))
            #expect(!FileManager.default.fileExists(atPath: temp.file("L0")))

            server.release()
            let rerun = try await HaulProcess.run(
                ["get", "-j", "2"] + urls,
                home: temp.file("home"),
                directory: temp.path
            )
            #expect(rerun.status == 0, "\(rerun.stderr)")
            #expect(rerun.stderr.contains("Done: 6 ok, 0 failed"))
            #expect(rerun.stderr.contains("Already complete: \(temp.file("s0"))"))
            #expect(server.requests(for: "/s0").count == 1, "a verified file is not fetched again")
            #expect(server.requests(for: "/L0").last?.header("Range")?.hasPrefix("bytes=") == true)
            for name in ["s0", "s1", "L0", "L1", "L2", "L3"] {
                #expect(sha256(file: temp.file(name)) == server.sha256("/\(name)"))
            }
        }
    }
}
