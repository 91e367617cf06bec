import Dispatch
import Foundation
import HaulClient
import HaulTestSupport
import Synchronization
import Testing

/// A daemon's stop is not held by its clients' connections: one that never sent a byte (a
/// pooled connection an HTTP client opened and did not use), one idle after a request
/// (keep-alive), one that sent half a request head. Each used to keep the server's graceful
/// shutdown waiting, and a test suite hung on it.
@Suite("Daemon stop with open connections", .timeLimit(.minutes(5)))
struct DaemonStopTests {
    /// Raw TCP connections to a port, closed at the latest when the fallback fires.
    final class Connections: Sendable {
        private let descriptors = Mutex<[Int32]>([])
        /// Whether the fallback had to close them (the stop waited for them).
        let closedByFallback = Mutex(false)

        func open(port: Int, sending text: String?) throws {
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let connected = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(descriptor, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            guard connected else {
                close(descriptor)
                throw POSIXError(.ECONNREFUSED)
            }
            if let text {
                let bytes = Array(text.utf8)
                _ = bytes.withUnsafeBytes { send(descriptor, $0.baseAddress, $0.count, 0) }
            }
            descriptors.withLock { $0.append(descriptor) }
        }

        /// Reads until `marker` has arrived on the connection last opened (at most 60 s), on a
        /// thread of its own: a blocking read must not hold one of the few threads every
        /// other test's tasks run on.
        func read(until marker: String) async -> String {
            await withCheckedContinuation { continuation in
                DispatchQueue.global().async { continuation.resume(returning: self.readBlocking(until: marker)) }
            }
        }

        private func readBlocking(until marker: String) -> String {
            guard let descriptor = descriptors.withLock({ $0.last }) else { return "" }
            var timeout = timeval(tv_sec: 60, tv_usec: 0)
            setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            var received: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while !String(decoding: received, as: UTF8.self).contains(marker) {
                let count = chunk.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                if count <= 0 { break }
                received += chunk[0..<count]
            }
            return String(decoding: received, as: UTF8.self)
        }

        func closeAll(asFallback: Bool) {
            let open = descriptors.withLock { descriptors in
                defer { descriptors = [] }
                return descriptors
            }
            if asFallback, !open.isEmpty { closedByFallback.withLock { $0 = true } }
            for descriptor in open { close(descriptor) }
        }
    }

    @Test("a connection that sent nothing, one idle after a request, one half a head: the stop closes them")
    func stopClosesConnections() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let connections = Connections()
        let fallback = Mutex<Task<Void, any Error>?>(nil)
        defer { fallback.withLock { $0?.cancel() } }
        try await withDaemon(home: home, listen: ("127.0.0.1", 0)) { client, _ in
            let listen = try #require(try await client.status().listen)
            let port = try #require(Int(listen.split(separator: ":").last ?? ""))
            let token = try String(contentsOfFile: home + "/daemon.token", encoding: .utf8)
                .trimmingCharacters(in: .whitespacesAndNewlines)
            try connections.open(port: port, sending: nil)
            try connections.open(port: port, sending: "GET /v1/status HTTP/1.1\r\nHost: x\r\n")
            try connections.open(
                port: port,
                sending: "GET /v1/status HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer \(token)\r\n\r\n"
            )
            let answer = await connections.read(until: "\"pid\"")
            #expect(answer.hasPrefix("HTTP/1.1 200"), "\(answer.prefix(200))")
            // The stop begins when this returns. Only if it waits for the connections: close
            // them a minute on, so the test ends and says so (timed from the stop, not from
            // a daemon start a loaded machine may make slow).
            fallback.withLock {
                $0 = Task {
                    try await Task.sleep(for: .seconds(60))
                    connections.closeAll(asFallback: true)
                }
            }
        }
        #expect(!connections.closedByFallback.withLock { $0 }, "the daemon's stop waited for its clients' connections")
        connections.closeAll(asFallback: false)
    }
}
