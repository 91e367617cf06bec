import CHaulSystem
import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The machine's network as the kernel sees it: a change stream from rtnetlink (links,
/// addresses and routes; no polling) and, for a destination, the route the kernel would
/// take and whether its interface can carry anything now. Where NetworkManager runs, the
/// interfaces it says are metered (``meteredBySystem``), from its D-Bus signals.
///
/// ```swift
/// let monitor = try NetworkMonitor()
/// for await _ in monitor.changes() {
///     print(NetworkMonitor.route(to: "10.0.0.7") ?? "no route")
/// }
/// ```
/// The monitor does not interpret the kernel's messages: each one means "look again", and
/// the look (``route(to:)``) asks the kernel the question the download cares about.
public final class NetworkMonitor: Sendable {
    /// Where traffic to a destination would leave the machine.
    public struct Route: Sendable, Equatable, CustomStringConvertible {
        /// The interface, such as `eth0` or `wwan0`.
        public var interface: String
        /// The address packets would come from.
        public var sourceAddress: String
        /// Whether the interface is up and has a carrier: a route over a link that is down
        /// (a pulled cable, a peer gone) is kept by the kernel but carries nothing.
        public var isUsable: Bool

        public var description: String {
            "\(sourceAddress) via \(interface)" + (isUsable ? "" : " (down)")
        }
    }

    private let descriptor: Int32
    private let wake: (read: Int32, write: Int32)
    private let subscribers = Mutex<[UUID: AsyncStream<Void>.Continuation]>([:])
    private let stopped = Mutex(false)
    private let systemMetered = Mutex<Set<String>>([])
    private let networkManager = Mutex<NetworkManagerWatch?>(nil)

    /// Opens the rtnetlink socket and starts reading it on a thread of its own; with a
    /// system bus address, also watches NetworkManager there for metered interfaces
    /// (``meteredBySystem``).
    /// - Parameter systemBus: the D-Bus system bus (`unix:path=…`); by default
    ///   `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket; nil not to ask NetworkManager.
    /// - Throws: ``HaulError/Code/invalidArgument`` where the system has no rtnetlink.
    public init(systemBus: String? = NetworkMonitor.systemBusAddress) throws {
        let fd = chaul_rtnetlink_open()
        guard fd >= 0 else {
            throw HaulError(
                .invalidArgument,
                "Cannot watch the network: rtnetlink is not available (\(String(cString: strerror(errno))))"
            )
        }
        var pipeEnds: [Int32] = [0, 0]
        guard pipe(&pipeEnds) == 0 else {
            close(fd)
            throw HaulError(.invalidArgument, "Cannot watch the network: \(String(cString: strerror(errno)))")
        }
        _ = fcntl(pipeEnds[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(pipeEnds[1], F_SETFD, FD_CLOEXEC)
        descriptor = fd
        wake = (pipeEnds[0], pipeEnds[1])
        let thread = Thread { [self] in readLoop() }
        thread.name = "haul-netlink"
        thread.start()
        // Without a watch (no pipe to be had), the metered interfaces are the user's patterns alone.
        if let systemBus,
            let watch = try? NetworkManagerWatch(address: systemBus, onChange: { [weak self] in self?.systemSaid($0) })
        {
            networkManager.withLock { $0 = watch }
        }
    }

    /// The system bus as this process's environment names it (`DBUS_SYSTEM_BUS_ADDRESS`),
    /// else the standard socket.
    public static var systemBusAddress: String { NetworkManagerWatch.systemBusAddress() }

    /// The interfaces NetworkManager says are metered (its devices' `Metered` property is
    /// `yes` or `guess-yes`); empty where it does not run. A change of it is a change.
    public var meteredBySystem: Set<String> { systemMetered.withLock { $0 } }

    private func systemSaid(_ metered: Set<String>) {
        let changed = systemMetered.withLock { known in
            defer { known = metered }
            return known != metered
        }
        guard changed else { return }
        for continuation in subscribers.withLock({ Array($0.values) }) { continuation.yield(()) }
    }

    deinit {
        close(wake.read)
        close(wake.write)
    }

    /// Every change from now on, coalesced: a burst of kernel messages (a link going down
    /// takes its addresses and routes with it) is one element for a reader that is busy.
    public func changes() -> AsyncStream<Void> {
        let (stream, continuation) = AsyncStream<Void>.makeStream(bufferingPolicy: .bufferingNewest(1))
        let id = UUID()
        let closed = stopped.withLock { $0 }
        if closed {
            continuation.finish()
            return stream
        }
        subscribers.withLock { $0[id] = continuation }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.removeValue(forKey: id) }
        }
        return stream
    }

    /// Stops reading and ends every change stream.
    public func stop() {
        let already = stopped.withLock { stopped in
            defer { stopped = true }
            return stopped
        }
        guard !already else { return }
        var byte: UInt8 = 1
        _ = write(wake.write, &byte, 1)
        networkManager.withLock { $0 }?.stop()
    }

    private func readLoop() {
        var buffer = [UInt8](repeating: 0, count: 65536)
        var polls = [
            pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0),
            pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
        ]
        while true {
            let ready = poll(&polls, 2, -1)
            if ready < 0, errno == EINTR { continue }
            if ready < 0 || polls[1].revents != 0 { break }
            guard polls[0].revents != 0 else { continue }
            // Drain what is there: one look answers all of it.
            var received = false
            while recv(descriptor, &buffer, buffer.count, Int32(MSG_DONTWAIT)) > 0 { received = true }
            // ENOBUFS: the kernel dropped messages for us; that is a change too.
            if received || errno == ENOBUFS {
                for continuation in subscribers.withLock({ Array($0.values) }) { continuation.yield(()) }
            }
        }
        close(descriptor)
        for continuation in subscribers.withLock({ Array($0.values) }) { continuation.finish() }
        subscribers.withLock { $0.removeAll() }
    }

    // MARK: Looking

    /// A name (never resolved) whose route is the default route.
    static let defaultRouteProbe = "default-route.invalid"

    /// The route the kernel would take to `host` now, or nil when it has none. For an IP
    /// address, that address's route; for a name (not resolved: with no network there is no
    /// name server either), the default route — IPv4's, else IPv6's.
    ///
    /// Asked by connecting a UDP socket, which sends nothing: the kernel only chooses the
    /// route and the source address.
    public static func route(to host: String) -> Route? {
        // Brackets around an IPv6 address trimmed (by hand: Foundation's trim of a character
        // set takes 0.2 ms the first time, on the way to a first download's request).
        let scalars = host.unicodeScalars
        let isBracket: (Unicode.Scalar) -> Bool = { $0 == "[" || $0 == "]" }
        let start = scalars.firstIndex { !isBracket($0) } ?? scalars.endIndex
        let end = scalars[start...].lastIndex { !isBracket($0) }.map(scalars.index(after:)) ?? start
        let bare = String(Substring(scalars[start..<end]))
        if let bytes = IPAddress.bytes(bare) {
            // An IPv4-mapped IPv6 address (::ffff:a.b.c.d) goes out as IPv4, from the IPv4
            // address of an interface: asked as IPv6, its source address is on no interface.
            let mapped =
                bytes.count == 16 && bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xff && bytes[11] == 0xff
            return route(toAddress: mapped ? Array(bytes[12..<16]) : bytes)
        }
        // Documentation addresses (RFC 5737, RFC 3849): only the route table is consulted.
        return route(toAddress: [192, 0, 2, 1])
            ?? route(toAddress: [0x20, 0x01, 0x0d, 0xb8] + [UInt8](repeating: 0, count: 11) + [1])
    }

    private static func route(toAddress bytes: [UInt8]) -> Route? {
        let family = bytes.count == 4 ? AF_INET : AF_INET6
        let fd = socket(family, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var storage = sockaddr_storage()
        /// `address` at the start of `storage`; its size.
        func store<Address>(_ address: Address) -> socklen_t {
            withUnsafeMutableBytes(of: &storage) { target in
                withUnsafeBytes(of: address) { target.copyMemory(from: $0) }
            }
            return socklen_t(MemoryLayout<Address>.size)
        }
        let length: socklen_t
        if family == AF_INET {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(9).bigEndian)
            withUnsafeMutableBytes(of: &address.sin_addr) { $0.copyBytes(from: bytes) }
            length = store(address)
        } else {
            var address = sockaddr_in6()
            address.sin6_family = sa_family_t(AF_INET6)
            address.sin6_port = in_port_t(UInt16(9).bigEndian)
            withUnsafeMutableBytes(of: &address.sin6_addr) { $0.copyBytes(from: bytes) }
            length = store(address)
        }
        let connected = withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, length) == 0 }
        }
        guard connected else { return nil }
        var local = sockaddr_storage()
        var localLength = socklen_t(MemoryLayout<sockaddr_storage>.size)
        let named = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &localLength) == 0 }
        }
        guard named, let (interface, source) = interface(owning: local) else { return nil }
        let flags = chaul_interface_flags(interface)
        let usable = flags >= 0 && flags & Int32(IFF_UP) != 0 && flags & Int32(IFF_RUNNING) != 0
        return Route(interface: interface, sourceAddress: source, isUsable: usable)
    }

    /// The interface holding the local address `local`, and that address in text.
    private static func interface(owning local: sockaddr_storage) -> (String, String)? {
        var local = local
        let wanted = addressText(&local)
        var list: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&list) == 0, let first = list else { return nil }
        defer { freeifaddrs(list) }
        var cursor: UnsafeMutablePointer<ifaddrs>? = first
        while let entry = cursor {
            defer { cursor = entry.pointee.ifa_next }
            guard let address = entry.pointee.ifa_addr, address.pointee.sa_family == local.ss_family else { continue }
            var candidate = sockaddr_storage()
            let size =
                Int32(address.pointee.sa_family) == AF_INET
                ? MemoryLayout<sockaddr_in>.size : MemoryLayout<sockaddr_in6>.size
            withUnsafeMutableBytes(of: &candidate) { target in
                target.copyMemory(from: UnsafeRawBufferPointer(start: address, count: size))
            }
            if let text = wanted, addressText(&candidate) == text {
                return (String(cString: entry.pointee.ifa_name), text)
            }
        }
        return nil
    }

    private static func addressText(_ storage: inout sockaddr_storage) -> String? {
        var text = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        let family = Int32(storage.ss_family)
        let converted: UnsafePointer<CChar>? = withUnsafePointer(to: &storage) { pointer in
            if family == AF_INET {
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { address in
                    var raw = address.pointee.sin_addr
                    return inet_ntop(AF_INET, &raw, &text, socklen_t(text.count))
                }
            }
            return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { address in
                var raw = address.pointee.sin6_addr
                return inet_ntop(AF_INET6, &raw, &text, socklen_t(text.count))
            }
        }
        guard converted != nil else { return nil }
        return String(cString: text)
    }
}
