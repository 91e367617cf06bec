import Foundation
import Testing

/// A veth pair the test creates: one end (`outside`) in this network namespace, the other
/// (`inside`) in a namespace of the test's own, each with an address of a /30 only they use;
/// removed (both ends and the namespace) by ``remove()``. Root only.
package struct VethPair: Sendable {
    package let namespace: String
    package let outside: String
    package let inside: String
    package let outsideAddress: String
    package let insideAddress: String

    package static var ip: String? { ExternalServer.findExecutable("ip") }
    /// Whether this process may create namespaces and links.
    package static var isPossible: Bool { getuid() == 0 && ip != nil }
    package static var usable: Bool { isPossible || ExternalServer.isCI }

    /// Runs `ip` with `arguments`, returning its status and what it printed.
    @discardableResult
    package static func ip(_ arguments: [String]) async throws -> (status: Int32, output: String) {
        let ip = try #require(VethPair.ip, "iproute2 is not installed (apt-get install iproute2)")
        return try await Command.run(ip, arguments)
    }

    /// Creates the pair, both ends up, with 10.<a>.<b>.1 outside and .2 inside. Until
    /// ``remove()`` it holds a change of this namespace's links (``NetworkChanges``).
    package static func create() async throws -> VethPair {
        try #require(getuid() == 0, "network namespaces need root")
        await NetworkChanges.shared.beginChange()
        let tag = String(UInt32.random(in: 0..<0xFFFFFF), radix: 16)
        let (a, b) = (Int.random(in: 200...250), Int.random(in: 0...63) * 4)
        let pair = VethPair(
            namespace: "haul-test-\(tag)",
            outside: "hlo\(tag)",
            inside: "hli\(tag)",
            outsideAddress: "10.\(a).\(b).1",
            insideAddress: "10.\(a).\(b).2"
        )
        let steps: [[String]] = [
            ["netns", "add", pair.namespace],
            ["link", "add", pair.outside, "type", "veth", "peer", "name", pair.inside],
            ["link", "set", pair.inside, "netns", pair.namespace],
            ["addr", "add", "\(pair.outsideAddress)/30", "dev", pair.outside],
            ["link", "set", pair.outside, "up"],
            ["-n", pair.namespace, "addr", "add", "\(pair.insideAddress)/30", "dev", pair.inside],
            ["-n", pair.namespace, "link", "set", pair.inside, "up"],
            ["-n", pair.namespace, "link", "set", "lo", "up"],
        ]
        for step in steps {
            let (status, output) = try await ip(step)
            if status != 0 {
                await pair.remove()
                Issue.record("ip \(step.joined(separator: " ")) failed: \(output)")
                throw POSIXError(.EPERM)
            }
        }
        return pair
    }

    /// Sets the outside end, or the inside one (which takes the outside's carrier), up or down.
    package func set(inside: Bool = false, up: Bool) async throws {
        let arguments =
            inside
            ? ["-n", namespace, "link", "set", self.inside, up ? "up" : "down"]
            : ["link", "set", outside, up ? "up" : "down"]
        let (status, output) = try await VethPair.ip(arguments)
        #expect(status == 0, "\(output)")
    }

    /// Runs `body` with a new pair and nginx serving `file` (`/slow/` at `slowRate`) from
    /// inside the namespace on the inner address; or, with `serverOutside`, from this
    /// namespace on the outer address, the namespace's default route going to it. Stops
    /// nginx and removes the pair afterwards, whether `body` throws or not.
    package static func withServer(
        slowRate: String,
        serving file: [UInt8],
        serverOutside: Bool = false,
        _ body: (VethPair, ExternalServer) async throws -> Void
    ) async throws {
        let pair = try await VethPair.create()
        do {
            if serverOutside {
                let (status, output) = try await ip(
                    ["-n", pair.namespace, "route", "add", "default", "via", pair.outsideAddress]
                )
                #expect(status == 0, "\(output)")
            }
            let server = try await ExternalServer.startNginx(
                slowRate: slowRate,
                host: serverOutside ? pair.outsideAddress : pair.insideAddress,
                namespace: serverOutside ? nil : pair.namespace
            )
            do {
                try Data(file).write(to: URL(fileURLWithPath: server.root + "/big.bin"))
                try await body(pair, server)
            } catch {
                await server.stop()
                throw error
            }
            await server.stop()
        } catch {
            await pair.remove()
            throw error
        }
        await pair.remove()
    }

    /// Deletes the pair (deleting one end deletes both) and the namespace.
    package func remove() async {
        _ = try? await VethPair.ip(["link", "del", outside])
        _ = try? await VethPair.ip(["netns", "del", namespace])
        await NetworkChanges.shared.endChange()
    }
}
