import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// NetworkManager's word on which interfaces are metered — its devices' D-Bus `Metered`
/// property, `yes` or `guess-yes` (a phone's hotspot, say) — kept current from its signals
/// on the system bus, on a thread of its own.
///
/// Where no system bus exists, there is no NetworkManager either, and the watch ends at
/// once, having said nothing. Where the bus runs but NetworkManager does not, the set is
/// empty until it starts (the bus tells when its name gets an owner). A bus connection that
/// breaks is made again, after 5 s and then up to a minute apart.
final class NetworkManagerWatch: Sendable {
    /// NetworkManager's name, object and interfaces on the bus.
    static let service = "org.freedesktop.NetworkManager"
    static let object = "/org/freedesktop/NetworkManager"
    static let deviceInterface = "org.freedesktop.NetworkManager.Device"
    static let properties = "org.freedesktop.DBus.Properties"

    /// NM_METERED_YES and NM_METERED_GUESS_YES; unknown (0), no (2) and guess-no (4) are not metered.
    static let meteredValues: Set<UInt32> = [1, 3]

    /// The signals after which the answer may differ: a device's own properties (not its
    /// access points' signal strength, which changes every few seconds), a device added
    /// or removed, NetworkManager starting or stopping.
    static let rules = [
        "type='signal',sender='\(service)',interface='\(properties)',member='PropertiesChanged',arg0='\(deviceInterface)'",
        "type='signal',sender='\(service)',interface='\(service)',member='DeviceAdded'",
        "type='signal',sender='\(service)',interface='\(service)',member='DeviceRemoved'",
        "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='\(service)'",
    ]

    /// The system bus: `DBUS_SYSTEM_BUS_ADDRESS`, else the standard socket.
    static func systemBusAddress(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        environment["DBUS_SYSTEM_BUS_ADDRESS"] ?? "unix:path=/var/run/dbus/system_bus_socket"
    }

    private let address: String
    private let onChange: @Sendable (Set<String>) -> Void
    private let wake: (read: Int32, write: Int32)
    private let stopped = Mutex(false)

    /// Starts watching the bus at `address`; `onChange` hears each new answer (the first one
    /// too, unless it is empty).
    init(address: String, onChange: @escaping @Sendable (Set<String>) -> Void) throws {
        var ends: [Int32] = [0, 0]
        guard pipe(&ends) == 0 else {
            throw HaulError(.invalidArgument, "Cannot watch NetworkManager: \(String(cString: strerror(errno)))")
        }
        _ = fcntl(ends[0], F_SETFD, FD_CLOEXEC)
        _ = fcntl(ends[1], F_SETFD, FD_CLOEXEC)
        self.address = address
        self.onChange = onChange
        wake = (ends[0], ends[1])
        let thread = Thread { [self] in run() }
        thread.name = "haul-networkmanager"
        thread.start()
    }

    deinit {
        close(wake.read)
        close(wake.write)
    }

    /// Stops the watch; its thread ends at once.
    func stop() {
        let already = stopped.withLock { stopped in
            defer { stopped = true }
            return stopped
        }
        guard !already else { return }
        var byte: UInt8 = 1
        _ = write(wake.write, &byte, 1)
    }

    private var isStopped: Bool { stopped.withLock { $0 } }

    private func run() {
        var told: Set<String> = []
        var delay = Duration.seconds(5)
        var connectedOnce = false
        while !isStopped {
            do {
                let connection = try DBus.Connection(address: address)
                connectedOnce = true
                delay = .seconds(5)
                try watch(connection, told: &told)
                return  // Stopped.
            } catch {
                // No bus here: nothing to watch, ever. A bus that went away: try again later.
                guard connectedOnce else { return }
                if !told.isEmpty {
                    told = []
                    onChange([])
                }
            }
            if sleep(delay) { return }
            delay = min(delay * 2, .seconds(60))
        }
    }

    /// Sleeps `duration`; true when stopped meanwhile.
    private func sleep(_ duration: Duration) -> Bool {
        var poller = pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0)
        let milliseconds = Int32(duration.components.seconds * 1000)
        while true {
            let ready = poll(&poller, 1, milliseconds)
            if ready < 0, errno == EINTR { continue }
            return ready != 0
        }
    }

    /// Asks, tells, and asks again after each signal, until stopped.
    private func watch(_ connection: DBus.Connection, told: inout Set<String>) throws(DBus.Failure) {
        let (bus, path, interface) = DBus.Connection.bus
        for rule in NetworkManagerWatch.rules {
            try connection.call(bus, path, interface, "AddMatch", [.string(rule)], until: .now + .seconds(5))
        }
        while !isStopped {
            let metered = try NetworkManagerWatch.meteredInterfaces(connection)
            if metered != told {
                told = metered
                onChange(metered)
            }
            guard try connection.waitForSignal(until: nil, wake: wake.read) else { return }
            // A change comes as a burst of signals: one answer after it settles.
            while try connection.waitForSignal(until: .now + .milliseconds(100), wake: wake.read) {}
        }
    }

    /// The interfaces NetworkManager's devices say are metered; empty when it does not run.
    static func meteredInterfaces(_ connection: DBus.Connection) throws(DBus.Failure) -> Set<String> {
        let devices: [DBus.Value]
        do {
            let reply = try connection.call(service, object, service, "GetDevices", until: .now + .seconds(5))
            guard case .array(let paths) = reply.first else { return [] }
            devices = paths
        } catch let failure where failure.errorName != nil {
            return []  // NetworkManager does not run (ServiceUnknown), or refuses: it says nothing.
        }
        var metered: Set<String> = []
        for device in devices.prefix(1_024) {
            guard case .objectPath(let devicePath) = device else { continue }
            let values: [String: DBus.Value]
            do {
                let reply = try connection.call(
                    service,
                    devicePath,
                    properties,
                    "GetAll",
                    [.string(deviceInterface)],
                    until: .now + .seconds(5)
                )
                values = reply.first?.dictionary ?? [:]
            } catch let failure where failure.errorName != nil {
                continue  // The device went meanwhile.
            }
            guard let name = values["Interface"]?.string, !name.isEmpty, name.utf8.count <= 64,
                let value = values["Metered"]?.uint32, meteredValues.contains(value)
            else { continue }
            metered.insert(name)
        }
        return metered
    }
}
