import Foundation
import Haul
import Synchronization
import Testing

/// A private D-Bus bus (Debian's dbus-daemon, on a socket in a temporary directory) with a
/// stand-in for NetworkManager on it: a Python service (python3-dbus) that owns
/// `org.freedesktop.NetworkManager` and answers `GetDevices` and each device's properties
/// as NetworkManager does, and that the test drives line by line (`device NAME METERED`
/// adds a device or changes its `Metered`, with NetworkManager's signals). NetworkManager
/// itself cannot run in a test; the bus, its routing and its rules are the real ones.
package final class SystemBus: Sendable {
    package let directory: TemporaryDirectory
    /// `unix:path=…`, for `DBUS_SYSTEM_BUS_ADDRESS`.
    package let address: String
    private let bus: ChildProcess
    private let service: ChildProcess
    private let commands: FileHandle
    private let sent = Counter()

    package final class Counter: Sendable {
        package let value = Mutex(0)
    }

    package static var daemon: String? { ExternalServer.findExecutable("dbus-daemon") }
    /// Debian's Python, where python3-dbus and python3-gi are installed.
    package static let python = "/usr/bin/python3"
    package static var usable: Bool {
        (daemon != nil && FileManager.default.isExecutableFile(atPath: python)) || ExternalServer.isCI
    }

    private init(
        directory: TemporaryDirectory,
        address: String,
        bus: ChildProcess,
        service: ChildProcess,
        commands: FileHandle
    ) {
        self.directory = directory
        self.address = address
        self.bus = bus
        self.service = service
        self.commands = commands
    }

    /// Starts the bus and the stand-in, which waits on the bus before it says `ready`.
    package static func start() async throws -> SystemBus {
        let daemon = try #require(SystemBus.daemon, "dbus-daemon is not installed (apt-get install dbus-daemon)")
        let directory = try TemporaryDirectory()
        let socket = directory.file("bus")
        let config = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>haul-test</type>
              <listen>unix:path=\(socket)</listen>
              <auth>EXTERNAL</auth>
              <policy context="default">
                <allow user="*"/>
                <allow own="*"/>
                <allow send_destination="*"/>
                <allow receive_sender="*"/>
              </policy>
            </busconfig>
            """
        try config.write(toFile: directory.file("bus.conf"), atomically: true, encoding: .utf8)
        try script.write(toFile: directory.file("nm.py"), atomically: true, encoding: .utf8)
        _ = FileManager.default.createFile(atPath: directory.file("bus.out"), contents: nil)
        _ = FileManager.default.createFile(atPath: directory.file("nm.out"), contents: nil)

        let bus = try ChildProcess(
            daemon,
            arguments: [
                "--config-file=\(directory.file("bus.conf"))", "--nofork", "--nopidfile", "--print-address=1",
            ],
            standardOutput: .file(directory.file("bus.out"), append: true),
            standardError: .file(directory.file("bus.out"), append: true)
        )
        // dbus-daemon prints its address once it listens.
        for _ in 0..<3000 where !SystemBus.text(directory.file("bus.out")).contains("unix:") {
            guard bus.isRunning else { break }
            try await Task.sleep(for: .milliseconds(10))
        }
        guard SystemBus.text(directory.file("bus.out")).contains("unix:") else {
            bus.signal(SIGTERM)
            bus.waitUntilExit()
            Issue.record("dbus-daemon did not start: \(SystemBus.text(directory.file("bus.out")))")
            throw POSIXError(.ECHILD)
        }
        let address = "unix:path=\(socket)"

        let input = Pipe()
        let service = try ChildProcess(
            python,
            arguments: [directory.file("nm.py"), address],
            standardInput: .descriptor(input.fileHandleForReading.fileDescriptor),
            standardOutput: .file(directory.file("nm.out"), append: true),
            standardError: .file(directory.file("nm.out"), append: true)
        )
        try input.fileHandleForReading.close()
        let system = SystemBus(
            directory: directory,
            address: address,
            bus: bus,
            service: service,
            commands: input.fileHandleForWriting
        )
        guard try await system.waitForOutput("ready") else {
            system.stop()
            Issue.record("the NetworkManager stand-in did not start: \(system.serviceOutput)")
            throw POSIXError(.ECHILD)
        }
        return system
    }

    package static func with(_ body: (SystemBus) async throws -> Void) async throws {
        let system = try await start()
        defer { system.stop() }
        try await body(system)
    }

    /// Adds a device, or sets its `Metered` (1 yes, 2 no, 3 guess-yes, 4 guess-no), and
    /// waits until the stand-in has sent NetworkManager's signals for it.
    package func device(_ name: String, metered: Int) async throws {
        let number = sent.value.withLock {
            $0 += 1
            return $0
        }
        try commands.write(contentsOf: Data("device \(name) \(metered)\n".utf8))
        #expect(try await waitForOutput("ok \(number)"), "\(serviceOutput)")
    }

    /// Stops the stand-in: NetworkManager leaves the bus.
    package func stopNetworkManager() {
        service.signal(SIGTERM)
        service.waitUntilExit()
    }

    package func stop() {
        try? commands.close()
        stopNetworkManager()
        bus.signal(SIGTERM)
        bus.waitUntilExit()
    }

    package var serviceOutput: String { SystemBus.text(directory.file("nm.out")) }

    private func waitForOutput(_ line: String) async throws -> Bool {
        // Generous: Python's imports alone take seconds on a loaded machine.
        try await waitUntil(timeout: .seconds(60)) {
            self.serviceOutput.split(separator: "\n").contains { $0 == line }
        }
    }

    private static func text(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
    }

    /// The stand-in: NetworkManager's objects, methods and signals as Haul uses them, and
    /// more properties of other types than it reads (as the real one has).
    private static let script = """
        import sys
        import dbus, dbus.service, dbus.mainloop.glib
        from gi.repository import GLib

        dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
        bus = dbus.bus.BusConnection(sys.argv[1])
        NM = "org.freedesktop.NetworkManager"
        DEVICE = NM + ".Device"
        PROPERTIES = "org.freedesktop.DBus.Properties"

        class Device(dbus.service.Object):
            def __init__(self, index, name, metered):
                self.path = "/org/freedesktop/NetworkManager/Devices/%d" % index
                dbus.service.Object.__init__(self, bus, self.path)
                self.name = name
                self.metered = metered

            def properties(self):
                return dbus.Dictionary({
                    "Udi": dbus.String("/sys/devices/virtual/net/" + self.name),
                    "Path": dbus.String(""),
                    "Interface": dbus.String(self.name),
                    "Driver": dbus.String("veth"),
                    "Capabilities": dbus.UInt32(7),
                    "Ip4Address": dbus.UInt32(0),
                    "State": dbus.UInt32(100),
                    "StateReason": dbus.Struct((dbus.UInt32(100), dbus.UInt32(0)), signature="uu"),
                    "Managed": dbus.Boolean(True),
                    "Mtu": dbus.UInt32(1500),
                    "DeviceType": dbus.UInt32(1),
                    "AvailableConnections": dbus.Array([], signature="o"),
                    "Metered": dbus.UInt32(self.metered),
                    "LldpNeighbors": dbus.Array([dbus.Dictionary({"chassis-id": dbus.String("x"),
                        "port-id-type": dbus.UInt32(5)}, signature="sv")], signature="a{sv}"),
                    "Real": dbus.Boolean(True),
                    "Ip4Connectivity": dbus.UInt32(4),
                    "InterfaceFlags": dbus.UInt32(65539),
                    "HwAddress": dbus.String("02:00:00:00:00:01"),
                    "Ports": dbus.Array([], signature="o"),
                    "Speed": dbus.Int64(-1),
                    "Ratio": dbus.Double(0.5),
                    "Level": dbus.Int16(-3),
                    "Flags": dbus.Byte(9),
                }, signature="sv")

            @dbus.service.method(PROPERTIES, in_signature="s", out_signature="a{sv}")
            def GetAll(self, interface):
                if interface != DEVICE:
                    raise dbus.exceptions.DBusException("No such interface", name="org.freedesktop.DBus.Error.UnknownInterface")
                return self.properties()

            @dbus.service.method(PROPERTIES, in_signature="ss", out_signature="v")
            def Get(self, interface, name):
                return self.properties()[name]

            @dbus.service.signal(PROPERTIES, signature="sa{sv}as")
            def PropertiesChanged(self, interface, changed, invalidated):
                pass

        class Manager(dbus.service.Object):
            def __init__(self):
                dbus.service.Object.__init__(self, bus, "/org/freedesktop/NetworkManager")
                self.devices = []

            @dbus.service.method(NM, in_signature="", out_signature="ao")
            def GetDevices(self):
                return dbus.Array([d.path for d in self.devices], signature="o")

            @dbus.service.signal(NM, signature="o")
            def DeviceAdded(self, path):
                pass

        manager = Manager()
        name = dbus.service.BusName(NM, bus)
        count = 0

        def command(source, condition):
            global count
            line = sys.stdin.readline()
            if not line:
                loop.quit()
                return False
            words = line.split()
            if words[0] == "device":
                for device in manager.devices:
                    if device.name == words[1]:
                        device.metered = int(words[2])
                        device.PropertiesChanged(DEVICE, {"Metered": dbus.UInt32(device.metered)}, [])
                        break
                else:
                    device = Device(len(manager.devices), words[1], int(words[2]))
                    manager.devices.append(device)
                    manager.DeviceAdded(device.path)
            count += 1
            print("ok %d" % count, flush=True)
            return True

        GLib.io_add_watch(sys.stdin, GLib.IO_IN | GLib.IO_HUP, command)
        print("ready", flush=True)
        loop = GLib.MainLoop()
        loop.run()
        """
}
