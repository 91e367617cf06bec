import AsyncHTTPClient
import Foundation
import HaulTestSupport
import Testing

@testable import Haul
@testable import HaulClient

/// How Haul sets up its HTTP clients, beyond AsyncHTTPClient's defaults.
@Suite("Haul's HTTP clients", .timeLimit(.minutes(1)))
struct HTTPClientSetupTests {
    @Test("a downloader's client and the daemon's client make no trace spans when the program set up no tracer")
    func noSpansWithoutATracer() async throws {
        // AsyncHTTPClient's default is the global tracer, a no-op one until a program sets one
        // up, which would still be handed a span to make and drop for every request.
        try await Downloader.withDownloader(configuration: .init(store: .inMemory)) { downloader in
            #expect(downloader.clients.direct.tracer == nil)
        }
        let temp = try TemporaryDirectory()
        let client = HaulClient(socketPath: temp.file("daemon.sock"))
        #expect(client.http.tracer == nil)
        try await client.shutdown()
    }
}
