import AsyncHTTPClient
import Foundation
import Testing

@testable import Haul

/// How a downloader sets up its HTTP client, beyond AsyncHTTPClient's defaults.
@Suite("The downloader's HTTP client", .timeLimit(.minutes(1)))
struct HTTPClientSetupTests {
    @Test("makes no trace spans when the program set up no tracer (Haul sets up none)")
    func noSpansWithoutATracer() async throws {
        try await Downloader.withDownloader(configuration: .init(store: .inMemory)) { downloader in
            // AsyncHTTPClient's default is the global tracer, a no-op one until a program sets
            // one up, which would still be handed a span to make and drop for every request.
            #expect(downloader.clients.direct.tracer == nil)
        }
    }
}
