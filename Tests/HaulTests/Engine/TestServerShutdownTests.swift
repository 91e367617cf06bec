import HaulTesting
import NIOCore
import NIOPosix
import Testing

/// The test server itself: shut down while connections are being accepted, it closes each
/// one it accepted (served or not) and returns, instead of dropping one mid-accept — which
/// NIO traps on, taking the whole test process with it (it once failed CI so).
@Suite("Test server: shutdown during accepts", .timeLimit(.minutes(2)))
struct TestServerShutdownTests {
    @Test("30 shutdowns, each with 16 connections arriving as the listener closes: every one returns")
    func shutdownDuringAccepts() async throws {
        for _ in 0..<30 {
            let server = try await TestServer.start()
            let port = server.port
            await withTaskGroup(of: Void.self) { group in
                for _ in 0..<16 {
                    group.addTask {
                        let channel = try? await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                            .connect(host: "127.0.0.1", port: port).get()
                        try? await channel?.close()
                    }
                }
                group.addTask { await server.shutdown() }
            }
            #expect(server.openConnections == 0)
        }
    }
}
