import Foundation
import HaulTestSupport
import HaulTesting
import NIOCore
import Testing

@testable import Haul

/// ``Downloader/stream(_:progress:into:)``: a body handed to a sink as it arrives.
@Suite("Streaming a body to a sink", .timeLimit(.minutes(10)))
struct StreamTests {
    final class Collected: @unchecked Sendable {
        var bytes: [UInt8] = []
        var progress: [DownloadProgress] = []
    }

    static func request(_ server: TestServer, _ path: String, checksum: Checksum? = nil) -> DownloadRequest {
        DownloadRequest(url: server.url(path), destination: .directory("/nonexistent"), checksum: checksum)
    }

    @Test("the sink sees every byte in order, the progress counts them, and nothing is recorded")
    func collectsTheBody() async throws {
        try await withHarness { server, downloader, _ in
            server.set("/a.bin", .init(size: 1_000_000, chunked: true))
            let collected = Collected()
            let result = try await downloader.stream(
                Self.request(server, "/a.bin", checksum: try Checksum(parsing: "sha256=\(server.sha256("/a.bin"))")),
                progress: { collected.progress.append($0) },
                into: { buffer in collected.bytes += buffer.readableBytesView }
            )
            #expect(TestContent.sha256(collected.bytes) == server.sha256("/a.bin"))
            #expect(result.bytes == 1_000_000)
            #expect(result.totalBytes == nil, "chunked: no announced length")
            #expect(collected.progress.last?.bytesReceived == 1_000_000)
            #expect(collected.progress.map(\.bytesReceived) == collected.progress.map(\.bytesReceived).sorted())
            #expect(try await #require(downloader.store as? Store).allTasks().isEmpty)
        }
    }

    @Test("a body shorter than its Content-Length fails with how far it got, never as a whole file")
    func shorterThanAnnounced() async throws {
        try await withHarness { server, downloader, _ in
            server.set("/a.bin", .init(size: 100_000, lengthLie: .short(5000)))
            let collected = Collected()
            let error = try await #require(throws: HaulError.self) {
                _ = try await downloader.stream(Self.request(server, "/a.bin")) { buffer in
                    collected.bytes += buffer.readableBytesView
                }
            }
            #expect(error.code == .connection)
            #expect(error.message.contains("broke after \(collected.bytes.count) of 105000 bytes"), "\(error.message)")
            #expect(server.requests(for: "/a.bin").count == 1)
        }
    }

    @Test("what the sink throws ends the stream and comes back as it was thrown")
    func sinkFailure() async throws {
        struct Full: Error {}
        try await withHarness { server, downloader, _ in
            server.set("/a.bin", .init(size: 500_000))
            await #expect(throws: Full.self) {
                _ = try await downloader.stream(Self.request(server, "/a.bin")) { _ in throw Full() }
            }
            // The client is still usable: the broken connection was not handed back.
            let collected = Collected()
            _ = try await downloader.stream(Self.request(server, "/a.bin")) { collected.bytes += $0.readableBytesView }
            #expect(TestContent.sha256(collected.bytes) == server.sha256("/a.bin"))
        }
    }
}
