import AsyncHTTPClient
import Foundation
import HaulTestSupport
import Logging
import Synchronization
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

    @Test("below trace the HTTP client logs to a logger of its own: its ids never reach Haul's handler")
    func clientLoggerOfItsOwn() {
        // The client sets its request's and connection's ids on the logger it is given for
        // every request; a StreamLogHandler formats all of its metadata again at each.
        let counts = LogCounts()
        func client(at level: Logger.Level) {
            var logger = Logger(label: "haul") { _ in CountingLogHandler(counts: counts) }
            logger.logLevel = level
            var client = HTTPTransport.clientLogger(logger)
            client[metadataKey: "ahc-request-id"] = "1"
            client.debug("connection 1 on SelectableEventLoop")
        }
        for level in [Logger.Level.debug, .info, .notice, .error] { client(at: level) }
        #expect(counts.state.withLock { $0 } == (0, 0))
        // At trace the client's lines are Haul's too.
        client(at: .trace)
        #expect(counts.state.withLock { $0 } == (1, 1))
    }
}

/// What a ``CountingLogHandler`` was given: metadata set on it, and lines.
private final class LogCounts: Sendable {
    let state = Mutex((metadataSets: 0, lines: 0))
}

/// A log handler that counts the metadata set on it and the lines it is given.
private struct CountingLogHandler: LogHandler {
    let counts: LogCounts
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set {
            counts.state.withLock { $0.metadataSets += 1 }
            metadata[key] = newValue
        }
    }

    func log(event: LogEvent) {
        counts.state.withLock { $0.lines += 1 }
    }
}
