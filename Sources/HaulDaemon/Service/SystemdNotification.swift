import Foundation

/// Tells systemd how the daemon is doing, for a unit of `Type=notify` (the one
/// `scripts/install` installs): `READY=1` once its socket answers, so `systemctl --user start
/// haul` returns when `haul add` can reach it, and `STOPPING=1` when it begins to stop.
/// The protocol of `sd_notify(3)`: one datagram to the socket named by `$NOTIFY_SOCKET`
/// (a path, or an abstract name written with a leading `@`). Without that variable (not
/// started by systemd) it does nothing.
enum SystemdNotification {
    /// The daemon answers on its socket.
    static func ready() { send("READY=1\nMAINPID=\(getpid())") }

    /// The daemon has begun to stop.
    static func stopping() { send("STOPPING=1") }

    /// Sends `state` to `$NOTIFY_SOCKET`; a failure is not the daemon's concern (systemd
    /// then reports the unit as not started in time, which says more than a log line could).
    static func send(_ state: String, environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let name = environment["NOTIFY_SOCKET"], !name.isEmpty, var address = address(of: name) else { return }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + name.utf8.count)
        let bytes = Array(state.utf8)
        _ = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bytes.withUnsafeBytes { buffer in
                    sendto(fd, buffer.baseAddress, buffer.count, Int32(MSG_NOSIGNAL), socketAddress, length)
                }
            }
        }
    }

    /// The address of a socket name as systemd gives it: a path (starting with `/`) or an
    /// abstract name (starting with `@`, sent with a leading NUL); nil for anything else or
    /// a name too long for an address.
    static func address(of name: String) -> sockaddr_un? {
        var bytes = Array(name.utf8)
        guard let first = bytes.first, first == UInt8(ascii: "/") || first == UInt8(ascii: "@") else { return nil }
        if first == UInt8(ascii: "@") { bytes[0] = 0 }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let capacity = MemoryLayout.size(ofValue: address.sun_path)
        guard bytes.count < capacity else { return nil }
        withUnsafeMutableBytes(of: &address.sun_path) { path in
            path.copyBytes(from: bytes)
        }
        return address
    }
}
