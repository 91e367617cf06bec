import Foundation
import Haul
import HaulClient
import HaulDaemon
import Logging
import Testing

/// Runs a daemon in this process on a temporary home, on the store `engine` (SQLite in its
/// home, or a PostgreSQL database kept for that home), and a client of it.
package func withDaemon(
    on engine: StoreEngine = .sqlite,
    home: String,
    maxConcurrent: Int? = 3,
    listen: (host: String, port: Int)? = nil,
    rpcSecret: String? = nil,
    rpcDirectory: String? = nil,
    rpcAllowsAllOrigins: Bool = false,
    configure: (inout DaemonService.Configuration) -> Void = { _ in },
    _ body: (HaulClient, DaemonService) async throws -> Void
) async throws {
    var logger = Logger(label: "haul.daemon.test")
    logger.logLevel = .warning
    var configuration = DaemonService.Configuration(
        home: HaulHome(path: home),
        maxConcurrentDownloads: maxConcurrent,
        listen: listen,
        checkpointInterval: .milliseconds(100),
        logger: logger
    )
    configuration.rpcSecret = rpcSecret
    configuration.rpcDirectory = rpcDirectory
    configuration.rpcAllowsAllOrigins = rpcAllowsAllOrigins
    // The test process's one bootstrap of swift-metrics: every daemon here reports into it.
    DaemonMetrics.bootstrap()
    configuration.metrics = DaemonMetrics.registry
    configure(&configuration)
    let shared = try await engine.daemonStore(home: home)
    configuration.sharedStore = shared
    let daemon = DaemonService(configuration: configuration)
    do {
        try await run(daemon, home: home, body)
    } catch {
        try? await shared?.closeDatabase()
        throw error
    }
    try await shared?.closeDatabase()
}

/// Runs `daemon` (on `home`) until `body` is done with a client of it.
private func run(
    _ daemon: DaemonService,
    home: String,
    _ body: (HaulClient, DaemonService) async throws -> Void
) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await daemon.run() }
        let client = HaulClient(home: HaulHome(path: home))
        do {
            // Bounded generously: with the whole suite starting at once on two loaded cores, a
            // daemon can take a while to answer; the bound only turns a hang into a failure.
            // Each try may take its time too: at one second each, a daemon answering every
            // status in two was never seen answering (a local full run, 90 s of tries).
            let answered = try await waitUntil(timeout: .seconds(90)) {
                (try? await client.status(timeout: .seconds(15))) != nil
            }
            #expect(answered)
            try await body(client, daemon)
            try await client.shutdown()
            await daemon.stop()
            try await group.waitForAll()
        } catch {
            try? await client.shutdown()
            await daemon.stop()
            try? await group.waitForAll()
            throw error
        }
    }
}

/// Binds a Unix socket at `path` and closes it, leaving the file behind; or, with
/// `keepListening`, listens on it (taking connections, answering nothing) and returns it for
/// the caller to close.
@discardableResult
package func makeStaleSocket(_ path: String, keepListening: Bool = false) throws -> Int32 {
    let descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
    try #require(descriptor >= 0)
    var handedOver = false
    defer { if !handedOver { close(descriptor) } }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    withUnsafeMutableBytes(of: &address.sun_path) { raw in
        let bytes = Array(path.utf8.prefix(raw.count - 1))
        raw.copyBytes(from: bytes)
        raw[bytes.count] = 0
    }
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
        }
    }
    try #require(bound == 0)
    guard keepListening else { return -1 }
    try #require(listen(descriptor, 8) == 0)
    handedOver = true
    return descriptor
}
