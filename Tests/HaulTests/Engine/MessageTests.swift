import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// Failures say what happened in words a person uses: "timed out", "ended early".
@Suite("Failure messages", .timeLimit(.minutes(10)))
struct MessageTests {
    func downloader(_ temp: TemporaryDirectory, readTimeout: Duration = .seconds(10)) -> Downloader.Configuration {
        var configuration = testConfiguration(store: temp.file("home/haul.sqlite"), retries: 1)
        configuration.readTimeout = readTimeout
        return configuration
    }

    @Test("a server that goes silent mid-body: the failure says it timed out and after how long")
    func silentServerTimesOut() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            // 100 KB, then nothing, every time.
            server.set("/f.bin", .init(size: 1 << 20, stallAt: 100_000))
            try await Downloader.withDownloader(configuration: downloader(temp, readTimeout: .seconds(1))) {
                downloader in
                let error = await expectHaulError(.connection) {
                    _ = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
                }
                let text = error?.description ?? ""
                #expect(text.lowercased().contains("timed out"), "\(text)")
                #expect(text.contains("1 s"), "\(text)")
                #expect(!text.contains("HTTPClientError"), "\(text)")
            }
        }
    }

    @Test("a body shorter than its Content-Length: the failure says it ended early, with the counts")
    func shortBodyEndedEarly() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/f.bin", .init(size: 100_000, ranges: false, lengthLie: .short(5000)))
            try await Downloader.withDownloader(configuration: downloader(temp)) { downloader in
                let error = await expectHaulError(.connection) {
                    _ = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
                }
                let text = error?.description ?? ""
                #expect(text.contains("ended early"), "\(text)")
                #expect(text.contains(" of 105000 bytes"), "\(text)")
                #expect(!text.contains("NIOHTTP1") && !text.contains("HTTPParserError"), "\(text)")
            }
        }
    }

    @Test("a daemon that does not answer in time: the client says it is busy, not that it cannot be reached")
    func busyDaemon() async throws {
        let temp = try TemporaryDirectory()
        let home = try temp.directory("home")
        // A socket that takes connections and never answers: a daemon too busy to reply.
        let descriptor = try makeStaleSocket(home + "/daemon.sock", keepListening: true)
        defer { close(descriptor) }
        let client = HaulClient(home: HaulHome(path: home))
        let error = await expectHaulError(.connection) { _ = try await client.status(timeout: .seconds(1)) }
        try? await client.shutdown()
        let text = error?.description ?? ""
        #expect(text.contains("did not answer within 1 s"), "\(text)")
        #expect(text.contains("running but busy"), "\(text)")
        #expect(!text.contains("Start it with") && !text.contains("HTTPClientError"), "\(text)")
    }
}
