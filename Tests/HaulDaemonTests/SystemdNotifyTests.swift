import Foundation
import Haul
import HaulClient
import HaulTestSupport
import Testing

/// The daemon under systemd's `Type=notify` (the unit `scripts/install` installs): it says
/// `READY=1` on `$NOTIFY_SOCKET` once its socket answers, so `systemctl --user start haul`
/// returns when `haul add` can reach it, and `STOPPING=1` when it is asked to stop.
@Suite("systemd notification", .tags(.process), .timeLimit(.minutes(3)))
struct SystemdNotifyTests {
    @Test("READY=1 comes once the API answers, STOPPING=1 when stopped, and it exits 0")
    func readyThenStopping() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let notify = try NotifySocket(path: temp.file("notify"))
        let daemon = try HaulProcess(
            ["daemon", "start", "--foreground"],
            home: home,
            environment: ["NOTIFY_SOCKET": notify.path]
        )
        guard let ready = await notify.next() else {
            daemon.kill(SIGKILL)
            Issue.record("no notification within 60 s: \(await daemon.finish().stderr)")
            return
        }
        #expect(ready.split(separator: "\n").first == "READY=1")
        #expect(ready.contains("MAINPID=\(daemon.pid)"))
        // At once, without waiting: ready means answering.
        let client = HaulClient(home: HaulHome(path: home))
        _ = try await client.status(timeout: .seconds(5))
        try? await client.shutdown()

        let stop = try HaulProcess(["daemon", "stop"], home: home)
        #expect(await stop.finish().status == 0)
        #expect(await notify.next() == "STOPPING=1")
        let result = await daemon.finish()
        #expect(result.status == 0, "\(result.stderr)")
    }

    @Test("without NOTIFY_SOCKET, or with one that is not there, the daemon starts as usual")
    func noSocket() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let daemon = try HaulProcess(
            ["daemon", "start", "--foreground"],
            home: home,
            environment: ["NOTIFY_SOCKET": temp.file("nobody-listens")]
        )
        let client = HaulClient(home: HaulHome(path: home))
        #expect(try await waitUntil(timeout: .seconds(60)) { (try? await client.status(timeout: .seconds(1))) != nil })
        try? await client.shutdown()
        daemon.kill(SIGTERM)
        #expect(await daemon.finish().status == 0)
    }
}

/// A datagram socket standing in for systemd's notification socket.
private final class NotifySocket: Sendable {
    let path: String
    private let descriptor: Int32

    init(path: String) throws {
        self.path = path
        descriptor = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue), 0)
        guard descriptor >= 0 else { throw POSIXError(.EMFILE) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8)) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0 else { throw POSIXError(.EADDRINUSE) }
        // A receive gives up after 60 s, so a daemon that never says anything fails the test.
        var timeout = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(descriptor, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(descriptor) }

    /// The next datagram, received on a thread of its own (the receive blocks), or nil after 60 s.
    func next() async -> String? {
        let descriptor = self.descriptor
        return await withCheckedContinuation { continuation in
            Thread.detachNewThread {
                var buffer = [UInt8](repeating: 0, count: 4096)
                let count = buffer.withUnsafeMutableBytes { recv(descriptor, $0.baseAddress, $0.count, 0) }
                continuation.resume(returning: count > 0 ? String(decoding: buffer[..<count], as: UTF8.self) : nil)
            }
        }
    }
}
