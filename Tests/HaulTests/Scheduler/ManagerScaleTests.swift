import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Synchronization
import Testing

@testable import Haul

@Suite(
    "DownloadManager at scale and after a kill",
    .serialized,
    .tags(.process, .slow),
    .leftOutOfFastLoop,
    .timeLimit(.minutes(20))
)
struct ManagerScaleTests {
    @Test("kill -9 the process running a 20-file queue; a new manager finishes them all, in queue order")
    func killedQueueRecovers() async throws {
        let temp = try TemporaryDirectory()
        let home = try temp.directory("home")
        try await TestServer.withServer { server in
            let names = (0..<20).map { String(format: "q%02d", $0) }
            for (index, name) in names.enumerated() {
                server.set("/\(name)", .init(size: 600_000, seed: UInt64(index), bytesPerSecond: 1 << 20))
            }
            let urls = names.map { server.url("/\($0)").absoluteString }
            let child = try HaulProcess(
                ["get", "-q", "-j", "2", "--checkpoint-interval", "0.1"] + urls,
                home: home,
                directory: temp.path
            )
            #expect(try await waitUntil { server.requests.count >= 3 })
            // Killed once the store records a running task with data: readiness, not a fixed wait.
            let storePath = (home as NSString).appendingPathComponent("haul.sqlite")
            let store = try Store(path: storePath)
            #expect(
                try await waitUntil {
                    try await store.infos().contains { $0.state == .running && $0.bytesCommitted > 0 }
                }
            )
            child.kill(SIGKILL)
            _ = await child.finish()
            for name in names { server.update("/\(name)") { $0.bytesPerSecond = 4 << 20 } }

            let before = try await store.infos()
            print("after the kill:", before.map(\.state.rawValue))
            #expect(before.count == 20)
            #expect(
                before.contains { $0.state == .running },
                "the kill left running tasks behind: \(before.map(\.state))"
            )
            let unfinished = before.filter { $0.state != .completed }.map(\.id)

            var downloader = testConfiguration(store: storePath)
            downloader.store = .store(store)
            let configuration = DownloadManager.Configuration(downloader: downloader, maxConcurrentDownloads: 1)
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                let recorder = ManagerFixtures.Recorder(manager.events(), state: .running)
                // Bounded generously: the bound only turns a hang into a failure (a minute was
                // overrun once with the whole suite running on two cores).
                #expect(
                    try await waitUntil(timeout: .seconds(180)) {
                        try await manager.tasks().allSatisfy { $0.state == .completed }
                    }
                )
                // The last to start is the last in line: once it is told, every start before it was.
                let told = try await recorder.waitUntilTold(unfinished.last!)
                #expect(told)
                // The first may have started before the recorder subscribed; the rest follow queue order.
                let started = recorder.ids
                #expect(started == Array(unfinished.suffix(started.count)))
                #expect(started.count >= unfinished.count - 1)
                recorder.task.cancel()
            }
            for name in names { #expect(sha256(file: temp.file(name)) == server.sha256("/\(name)")) }
            #expect(try await store.infos().count == 20, "no task lost or duplicated")
        }
    }

    @Test("2,000 tiny files complete with the limit respected")
    func manyTinyFiles() async throws {
        let temp = try TemporaryDirectory()
        let downloads = try temp.directory("d")
        try await TestServer.withServer { server in
            for index in 0..<2000 { server.set("/t\(index)", .init(size: 512, seed: UInt64(index))) }
            let configuration = DownloadManager.Configuration(
                downloader: testConfiguration(store: temp.file("s.sqlite")),
                maxConcurrentDownloads: 8
            )
            let started = ContinuousClock.now
            try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                for index in 0..<2000 {
                    _ = try await manager.download(
                        DownloadRequest(url: server.url("/t\(index)"), destination: .directory(downloads))
                    )
                }
                #expect(
                    try await waitUntil(timeout: .seconds(300), every: .milliseconds(250)) {
                        try await manager.tasks().allSatisfy { $0.state == .completed }
                    }
                )
            }
            print("2,000 tiny files with -j 8 took \(ContinuousClock.now - started)")
            #expect(server.maxActiveResponses <= 8)
            let names = try FileManager.default.contentsOfDirectory(atPath: downloads)
            #expect(names.count == 2000)
            for index in stride(from: 0, to: 2000, by: 97) {
                #expect(sha256(file: downloads + "/t\(index)") == server.sha256("/t\(index)"))
            }
        }
    }

    @Test("listing 10,000 tasks")
    func listTenThousand() async throws {
        let temp = try TemporaryDirectory()
        let store = try Store(path: temp.file("s.sqlite"))
        try await store.insertMany(
            (0..<10_000).map { index in
                TaskRecord(
                    id: UUID(),
                    url: URL(string: "http://127.0.0.1/\(index)")!,
                    destination: .file(temp.file("f\(index)")),
                    explicitName: true,
                    requestHeaders: [],
                    checksum: nil,
                    overwrite: false,
                    now: Date()
                )
            }
        )
        let started = ContinuousClock.now
        let infos = try await store.infos()
        print("listing 10,000 tasks took \(ContinuousClock.now - started)")
        #expect(infos.count == 10_000)
        #expect(infos.map(\.url.lastPathComponent) == (0..<10_000).map(String.init))
    }
}
