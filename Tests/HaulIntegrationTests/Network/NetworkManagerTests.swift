import Foundation
import HaulTestSupport
import Synchronization
import Testing

@testable import Haul

/// NetworkManager's word on metered interfaces, read over D-Bus: against a real dbus-daemon
/// with a stand-in NetworkManager (``SystemBus``), and the message codec on its own against
/// what a hostile peer could send.
@Suite("NetworkManager", .serialized, .tags(.process), .timeLimit(.minutes(10)))
struct NetworkManagerTests {
    @Test(
        "the monitor follows NetworkManager's Metered (yes and guess-yes are metered) through its signals, devices added, and its leaving the bus",
        .enabled(if: SystemBus.usable)
    )
    func followsMetered() async throws {
        try await SystemBus.with { system in
            try await system.device("wlan-t", metered: 3)
            try await system.device("eth-t", metered: 2)
            let monitor = try NetworkMonitor(systemBus: system.address)
            defer { monitor.stop() }
            let changes = NetworkMonitorTests.Changes(monitor.changes())
            #expect(try await changes.until { monitor.meteredBySystem == ["wlan-t"] }, "\(monitor.meteredBySystem)")

            // A property changes: PropertiesChanged.
            var seen = changes.seen
            try await system.device("eth-t", metered: 1)
            #expect(try await changes.until { monitor.meteredBySystem == ["wlan-t", "eth-t"] })
            #expect(try await waitUntil { changes.seen > seen })
            try await system.device("wlan-t", metered: 4)
            #expect(try await changes.until { monitor.meteredBySystem == ["eth-t"] })
            // A device appears: DeviceAdded.
            try await system.device("wwan-t", metered: 1)
            #expect(try await changes.until { monitor.meteredBySystem == ["eth-t", "wwan-t"] })
            // NetworkManager leaves the bus: NameOwnerChanged; nothing is metered by its word.
            seen = changes.seen
            system.stopNetworkManager()
            #expect(try await changes.until { monitor.meteredBySystem.isEmpty })
            #expect(try await waitUntil { changes.seen > seen })
        }
    }

    @Test("no bus at the address: nothing is metered by NetworkManager, and the monitor works and stops")
    func noBus() async throws {
        let temp = try TemporaryDirectory()
        let monitor = try NetworkMonitor(systemBus: "unix:path=\(temp.file("none"))")
        #expect(monitor.meteredBySystem.isEmpty)
        #expect(NetworkMonitor.route(to: "127.0.0.1")?.interface == "lo")
        monitor.stop()
        #expect(
            NetworkManagerWatch.systemBusAddress(environment: [:]) == "unix:path=/var/run/dbus/system_bus_socket"
        )
        #expect(
            NetworkManagerWatch.systemBusAddress(environment: ["DBUS_SYSTEM_BUS_ADDRESS": "unix:path=/x"])
                == "unix:path=/x"
        )
        let abstract = DBus.Connection.socketAddress("tcp:host=a;unix:abstract=b%2Fc")
        #expect(abstract?.path == "b/c" && abstract?.abstract == true)
        let path = DBus.Connection.socketAddress("unix:guid=1,path=/run/bus")
        #expect(path?.path == "/run/bus" && path?.abstract == false)
        #expect(DBus.Connection.socketAddress("tcp:host=127.0.0.1,port=1") == nil)
    }

    @Test(
        "a message round-trips; truncated, oversized, badly padded or too deeply nested ones are refused, never trapped on"
    )
    func codec() throws {
        var call = DBus.Message.call(
            "org.freedesktop.NetworkManager",
            "/org/freedesktop/NetworkManager/Devices/1",
            "org.freedesktop.DBus.Properties",
            "Get",
            [.string("org.freedesktop.NetworkManager.Device"), .string("Metered"), .variant(.uint32(3))],
            serial: 7
        )
        call.replySerial = 3
        let bytes = call.encoded()
        #expect(bytes[0] == UInt8(ascii: "l") && bytes[1] == 1 && bytes[3] == 1)
        let decoded = try DBus.Message(decoding: bytes)
        #expect(decoded.kind == .methodCall && decoded.serial == 7 && decoded.replySerial == 3)
        #expect(decoded.path == call.path && decoded.interface == call.interface && decoded.member == "Get")
        #expect(decoded.destination == "org.freedesktop.NetworkManager")
        #expect(decoded.body == call.body)

        // Every truncation is refused.
        for length in stride(from: 0, to: bytes.count, by: 3) {
            #expect(throws: DBus.Failure.self) { try DBus.Message(decoding: Array(bytes.prefix(length))) }
        }
        // A body length of 2 GiB, a wrong byte order, another protocol version.
        var huge = bytes
        huge[4...7] = [0, 0, 0, 0x80]
        #expect(throws: DBus.Failure.self) { try DBus.Message(decoding: huge) }
        var order = bytes
        order[0] = UInt8(ascii: "x")
        #expect(throws: DBus.Failure.self) { try DBus.Message(decoding: order) }
        var version = bytes
        version[3] = 2
        #expect(throws: DBus.Failure.self) { try DBus.Message(decoding: version) }
        // Padding that is not zero.
        var padding = [UInt8](repeating: 0, count: 8)
        padding[0] = 1  // A byte, then 3 bytes of padding before a uint32...
        padding[1] = 9
        var reader = DBus.Reader(padding, littleEndian: true)
        _ = try reader.read(.basic(UInt8(ascii: "y")))
        #expect(throws: DBus.Failure.self) { try reader.read(.basic(UInt8(ascii: "u"))) }
        // Signatures: 33 nested arrays, an unended struct, an unknown code, a dict with a variant key.
        #expect(throws: DBus.Failure.self) { try DBus.TypeCode.parse(String(repeating: "a", count: 33) + "y") }
        #expect(throws: DBus.Failure.self) { try DBus.TypeCode.parse("(ii") }
        #expect(throws: DBus.Failure.self) { try DBus.TypeCode.parse("z") }
        #expect(throws: DBus.Failure.self) { try DBus.TypeCode.parse("a{vs}") }
        #expect(try DBus.TypeCode.parse("a{sv}(uu)aa{sv}").count == 3)
        // A variant holding variants 70 deep.
        var nested: [UInt8] = []
        for _ in 0..<70 { nested += [1, UInt8(ascii: "v"), 0] }
        nested += [1, UInt8(ascii: "y"), 0, 5]
        var deep = DBus.Reader(nested, littleEndian: true)
        #expect(throws: DBus.Failure.self) { try deep.read(.variant) }
        // An array whose length runs past the message.
        var array = DBus.Reader([0xFF, 0xFF, 0, 0, 1, 2], littleEndian: true)
        #expect(throws: DBus.Failure.self) { try array.read(.array(.basic(UInt8(ascii: "y")))) }
        // A string without its nul, and one that is not UTF-8.
        var unended = DBus.Reader([2, 0, 0, 0, 0x41, 0x42, 0x43], littleEndian: true)
        #expect(throws: DBus.Failure.self) { try unended.read(.basic(UInt8(ascii: "s"))) }
        var invalid = DBus.Reader([2, 0, 0, 0, 0xC3, 0x28, 0], littleEndian: true)
        #expect(throws: DBus.Failure.self) { try invalid.read(.basic(UInt8(ascii: "s"))) }
        // Big-endian values read as such.
        var big = DBus.Reader([0, 0, 1, 2], littleEndian: false)
        #expect(try big.read(.basic(UInt8(ascii: "u"))) == .uint32(258))
    }
}
