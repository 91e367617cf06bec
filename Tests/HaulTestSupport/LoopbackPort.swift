import Foundation

/// Loopback ports for the servers tests start.
package enum LoopbackPort {
    /// A loopback port that was free a moment ago.
    package static func free() throws -> Int {
        let (fd, port) = try bound()
        close(fd)
        return port
    }

    /// A TCP socket bound to a free loopback port, not listening, and its port: a port below
    /// the kernel's ephemeral range (32768 and up on Linux), so that once closed it cannot
    /// have been taken meanwhile as the source port of some other test's outgoing
    /// connection, as an ephemeral one could (a server started on it afterwards would then
    /// fail with "Address already in use").
    package static func bound() throws -> (fd: Int32, port: Int) {
        for _ in 0..<500 {
            let port = Int.random(in: 12_000..<32_000)
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            guard fd >= 0 else { break }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = UInt16(port).bigEndian
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
                    bind(fd, pointer, socklen_t(MemoryLayout<sockaddr_in>.size)) == 0
                }
            }
            if bound { return (fd, port) }
            close(fd)
        }
        throw POSIXError(.EADDRINUSE)
    }
}

/// A loopback port where nothing listens for as long as this lives: it is bound (so no other
/// test's server can take it meanwhile) and never listens, so every connection is refused.
package final class RefusingPort: Sendable {
    package let port: Int
    private let fd: Int32

    package init() throws {
        (fd, port) = try LoopbackPort.bound()
    }

    deinit { close(fd) }
}
