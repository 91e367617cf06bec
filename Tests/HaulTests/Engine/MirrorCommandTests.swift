import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// `haul get --mirror`, as a user runs it.
@Suite("haul get --mirror", .tags(.process), .timeLimit(.minutes(10)))
struct MirrorCommandTests {
    @Test("haul get --mirror: the file from both servers; a 404 mirror is named as dropped on stderr")
    func getWithMirrors() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                // The URL's bytes stop at 1 MiB until the mirror has served a segment (its check,
                // then a range): the URL cannot finish alone on a loaded machine.
                a.set("/f.bin", .init(size: MirrorTests.size, holdAt: 1 << 20))
                b.set("/f.bin", .init(size: MirrorTests.size, etag: .fixed("\"b\""), bytesPerSecond: 4 << 20))
                // The gone mirror carries credentials: never shown.
                let gone = "http://u:s3cret@127.0.0.1:\(b.port)/gone.bin"
                let run = Task {
                    try await HaulProcess.get(
                        [
                            "--mirror", b.url("/f.bin").absoluteString, "--mirror", gone,
                            "--max-connections-per-server", "2", "-x", "4", "--min-split", "256K",
                            a.url("/f.bin").absoluteString,
                        ],
                        in: temp
                    )
                }
                #expect(try await waitUntil { b.requests(for: "/f.bin").count >= 2 })
                a.release("/f.bin")
                let (status, _, stderr) = try await run.value
                #expect(status == 0, "\(stderr)")
                #expect(TestContent.sha256(file: temp.file("f.bin")) == a.sha256("/f.bin"))
                #expect(b.requests(for: "/f.bin").count > 1, "the mirror served segments")
                #expect(b.maxOpenConnections <= 3, "at most 2 for each of the two mirrors on it, and the check")
                #expect(stderr.contains("; from 2 of 3 sources"), "\(stderr)")
                #expect(
                    stderr.contains("haul: dropped http://u:***@127.0.0.1:\(b.port)/gone.bin: HTTP 404"),
                    "\(stderr)"
                )
                #expect(!stderr.contains("s3cret"))
            }
        }
    }

    @Test("haul add -i with tab-separated mirrors: the daemon fetches from both; haul list shows the sources")
    func daemonWithMirrors() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                let home = temp.file("home")
                let out = try temp.directory("out")
                // The URL's bytes stop at 1 MiB until the mirror has served a segment.
                a.set("/f.bin", .init(size: MirrorTests.size, holdAt: 1 << 20))
                b.set("/f.bin", .init(size: MirrorTests.size, etag: .fixed("\"b\""), bytesPerSecond: 4 << 20))
                let input = temp.file("input.txt")
                try "\(a.url("/f.bin").absoluteString)\t\(b.url("/f.bin").absoluteString)\n  out=x.bin\n".write(
                    toFile: input,
                    atomically: true,
                    encoding: .utf8
                )
                let started = try await HaulProcess.run(["daemon"], home: home)
                #expect(started.status == 0, "\(started.stderr)")
                let added = try await HaulProcess.run(
                    ["add", "-i", input, "-d", out, "-x", "4", "--min-split", "256K"],
                    home: home
                )
                #expect(added.status == 0, "\(added.stderr)")
                #expect(try await waitUntil { b.requests(for: "/f.bin").count >= 2 })
                a.release("/f.bin")
                let waited = try await HaulProcess.run(["wait"], home: home)
                #expect(waited.status == 0, "\(waited.stderr)")
                #expect(TestContent.sha256(file: out + "/x.bin") == a.sha256("/f.bin"))
                #expect(b.requests(for: "/f.bin").count > 1, "the mirror served segments")

                let listed = try await HaulProcess.run(["list", "--json"], home: home)
                let tasks = try #require(
                    try JSONSerialization.jsonObject(with: Data(listed.stdout.utf8)) as? [[String: Any]]
                )
                let sources = try #require(tasks.first?["sources"] as? [[String: Any]], "\(listed.stdout)")
                #expect(sources.compactMap { $0["url"] as? String } == [a, b].map { $0.url("/f.bin").absoluteString })
                #expect(sources.compactMap { $0["bytes"] as? Int }.reduce(0, +) == MirrorTests.size)
                #expect(sources.allSatisfy { $0["verified"] as? Bool == true && $0["dropped"] == nil })
                let table = try await HaulProcess.run(["list"], home: home)
                #expect(table.stdout.contains(": 2 of 2 sources"), "\(table.stdout)")
                _ = try await HaulProcess.run(["daemon", "stop"], home: home)
            }
        }
    }

    @Test("--mirror with several URLs, with -i, or with -o - is refused in one line")
    func refusedCombinations() async throws {
        let temp = try TemporaryDirectory()
        let several = try await HaulProcess.get(
            ["--mirror", "http://127.0.0.1:1/m", "http://127.0.0.1:1/a", "http://127.0.0.1:1/b"],
            in: temp
        )
        #expect(several.status == 2)
        #expect(
            several.stderr.contains("--mirror names other URLs of one file, and 2 URLs were given"),
            "\(several.stderr)"
        )
        let stream = try await HaulProcess.get(
            ["--mirror", "http://127.0.0.1:1/m", "-o", "-", "http://127.0.0.1:1/a"],
            in: temp
        )
        #expect(stream.status == 2)
        #expect(stream.stderr.contains("-o - streams one connection"), "\(stream.stderr)")
    }
}
