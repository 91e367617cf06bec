import Foundation

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A TCP listener on 127.0.0.1 that misbehaves the way networks do, for failures a real
/// server cannot be asked to produce.
///
/// - ``Fault/reset``: accepts, reads the request, and resets the connection (`SO_LINGER` 0).
/// - ``Fault/silent``: accepts, reads the request, and never answers (until stopped).
/// - ``Fault/blackhole``: a full accept queue that is never drained, so a new connection's
///   SYN goes unanswered and the client waits out its connect timeout.
public final class FaultyListener: @unchecked Sendable {
    public enum Fault: Sendable {
        case reset
        case silent
        case blackhole
    }

    /// The port it listens on.
    public let port: Int
    private let fd: Int32
    private var fillers: [Int32] = []
    /// Connections the silent listener holds open.
    private var held: [Int32] = []
    private var thread: Thread?
    private let lock = NSLock()
    private var stopped = false
    /// Connections reset so far.
    public var resets: Int { lock.withLock { resetCount } }
    private var resetCount = 0

    public init(_ fault: Fault) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EMFILE) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
            }
        }
        guard bound, listen(fd, fault == .blackhole ? 0 : 16) == 0 else {
            close(fd)
            throw POSIXError(.EADDRINUSE)
        }
        self.fd = fd
        port = Int(UInt16(bigEndian: address.sin_port))
        switch fault {
        case .blackhole:
            // Fill the queue (a backlog of 0 holds one, or two on some kernels); later SYNs
            // are dropped.
            for _ in 0..<3 {
                let client = socket(
                    AF_INET,
                    Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue),
                    0
                )
                var target = address
                _ = withUnsafePointer(to: &target) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        connect(client, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
                fillers.append(client)
            }
        case .reset, .silent:
            let listener = fd
            let silent = fault == .silent
            let thread = Thread { [weak self] in
                while true {
                    let client = accept(listener, nil, nil)
                    guard client >= 0 else { return }
                    var buffer = [UInt8](repeating: 0, count: 4096)
                    _ = read(client, &buffer, buffer.count)
                    if silent {
                        // Held open, answering nothing, until stop() closes it.
                        guard let self else {
                            close(client)
                            return
                        }
                        self.lock.withLock { self.held.append(client) }
                        continue
                    }
                    var abort = linger(l_onoff: 1, l_linger: 0)
                    setsockopt(client, SOL_SOCKET, SO_LINGER, &abort, socklen_t(MemoryLayout<linger>.size))
                    close(client)
                    guard let self else { return }
                    let done = self.lock.withLock {
                        self.resetCount += 1
                        return self.stopped
                    }
                    if done { return }
                }
            }
            self.thread = thread
            thread.start()
        }
    }

    /// Stops listening and closes every socket it holds.
    public func stop() {
        lock.withLock { stopped = true }
        shutdown(fd, Int32(SHUT_RDWR))
        close(fd)
        for filler in fillers { close(filler) }
        fillers.removeAll()
        for client in lock.withLock({ held }) { close(client) }
        lock.withLock { held.removeAll() }
    }

    deinit {
        if !lock.withLock({ stopped }) { stop() }
    }
}
