import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Synchronization
import Testing

@testable import Haul
@testable import HaulCLI

extension NetworkOutageTests {
    /// Downloads held back on a metered network, and let go.
    @Suite("Network outages: metered networks")
    struct Metered {
        @Test(
            "metered: the link's interface marked metered and the policy off, no bytes asked for; on, it completes; off again live, it waits",
            .enabled(if: usable)
        )
        func meteredPolicy() async throws {
            let bytes = TestContent.bytes(count: 12 << 20, seed: 43)
            try await VethPair.withServer(slowRate: "2m", serving: bytes) { pair, server in
                try await NetworkOutageTests.withDaemon { home, client in
                    try await meteredDownload(bytes, server, pair, home: home, client: client)
                }
            }
        }

        private func meteredDownload(
            _ bytes: [UInt8],
            _ server: ExternalServer,
            _ pair: VethPair,
            home: String,
            client: HaulClient
        ) async throws {
            let temp = try TemporaryDirectory()
            let out = try temp.directory("out")
            // The outer end of the pair is "metered", and metered networks are off.
            let set = try await HaulProcess.run(
                ["set", "--metered-interfaces", "wwan*,\(pair.outside)", "--allow-metered", "no"],
                home: home
            )
            #expect(set.status == 0, "\(set.stderr)")
            #expect(
                set.stdout.contains("allow-metered: no\nmetered-interfaces: wwan*,\(pair.outside)"),
                "\(set.stdout)"
            )
            let added = try await HaulProcess.run(
                ["add", "--session", "m", "-x", "1", "-d", out, server.url("/slow/big.bin").absoluteString],
                home: home
            )
            #expect(added.status == 0, "\(added.stderr)")
            #expect(try await waitUntil { try await client.tasks().first?.state == .waitingForNetwork })
            let waiting = try #require(try await client.tasks().first)
            #expect(waiting.errorMessage?.contains("metered") == true, "\(waiting.errorMessage ?? "")")
            let status = try await HaulProcess.run(["status"], home: home)
            #expect(status.stdout.contains("1 waiting for it"), "\(status.stdout)")
            #expect(
                status.stdout.contains("metered:  not allowed (interfaces wwan*,\(pair.outside))"),
                "\(status.stdout)"
            )
            let json = try await client.status()
            #expect(json.network?.allowMetered == false && json.network?.waitingTasks == 1)
            // Not a byte asked for (that an hour of waiting asks none is NetworkWaitClockTests').
            #expect(server.accessLog().isEmpty)
            #expect(try await client.tasks().first?.bytesCommitted == 0)

            // On: it runs. Off again while it runs: it stops and waits, live.
            _ = try await HaulProcess.run(["set", "--allow-metered", "yes"], home: home)
            #expect(try await waitUntil { (try await client.tasks().first?.bytesCommitted ?? 0) > 1 << 20 })
            _ = try await HaulProcess.run(["set", "--allow-metered", "no"], home: home)
            #expect(
                try await waitUntil(timeout: .seconds(30)) {
                    try await client.tasks().first?.state == .waitingForNetwork
                }
            )
            _ = try await HaulProcess.run(["set", "--allow-metered", "yes"], home: home)
            let waited = try await HaulProcess.run(["wait", "--session", "m"], home: home)
            #expect(waited.status == 0, "\(waited.stderr)")
            #expect(sha256(file: out + "/big.bin") == TestContent.sha256(bytes))
            let logged = try await client.loggedEvents(session: "m")
            let states = logged.filter { $0.kind == .state }.compactMap(\.to)
            #expect(!states.contains(.failed) && !states.contains(.retrying), "\(states)")
            // Each wait says it was for a metered route; the policy's turns were told as network events.
            #expect(logged.filter { $0.to == .waitingForNetwork }.map(\.reason) == [.metered, .metered])
            #expect(
                logged.filter { $0.kind == .network }.map(\.allowMetered) == [false, true, false, true],
                "\(logged)"
            )
            #expect(server.accessLog().last?[1] == "206")
            // Kept across a restart.
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
            let shown = try await HaulProcess.run(["set"], home: home)
            #expect(shown.stdout.contains("metered-interfaces: wwan*,\(pair.outside)"), "\(shown.stdout)")
        }
    }
}
