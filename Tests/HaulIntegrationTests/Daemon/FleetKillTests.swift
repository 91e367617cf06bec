import Crypto
import Foundation
import HaulClient
import HaulPostgres
import HaulTestSupport
import HaulWire
import HaulWireMapping
import PostgresNIO
import Synchronization
import Testing

@testable import Haul

extension FleetDaemonTests {
    /// A daemon killed mid-way: its downloads finish on the others.
    @Suite("Fleet of daemons: kill -9 of one")
    struct Kill {
        @Test(
            "three daemons at -j 2, 60 files at 1 MiB/s: each node runs two, never more; kill -9 of one mid-way and the others finish its downloads from their checkpoints, each file whole, none fetched in full twice, each completion told once"
        )
        func twoEachAndKill() async throws {
            try await FleetDaemonTests.withFleet(files: 60, size: 1 << 20, rate: "1m", limit: 2, perHost: 2) { fleet in
                let tasks = try await fleet.clients[0].add(
                    (0..<60).map { index in
                        DownloadRequest(
                            url: fleet.nginx.url("/slow/f\(index)"),
                            destination: .directory(fleet.out),
                            session: "fleet"
                        )
                    }
                )
                // Running per node, as the fleet has it, sampled at every look from here on.
                let most = Mutex<[String: Int]>([:])
                let running: @Sendable () async throws -> [String: Int] = {
                    let now = Dictionary(
                        try await fleet.clients[1].tasks().filter { $0.state == .running }.compactMap(\.node)
                            .map { ($0, 1) },
                        uniquingKeysWith: +
                    )
                    most.withLock { $0.merge(now, uniquingKeysWith: max) }
                    return now
                }
                #expect(try await waitUntil { try await running() == ["n0": 2, "n1": 2, "n2": 2] })
                // n2 dies once both its downloads have bytes committed.
                var held: [DownloadInfo] = []
                #expect(
                    try await waitUntil {
                        held = try await fleet.clients[0].tasks().filter { $0.node == "n2" && $0.state == .running }
                        return held.count == 2 && held.allSatisfy { $0.bytesCommitted > 0 }
                    }
                )
                let n2 = try #require(fleet.daemon(2))
                n2.kill(SIGKILL)
                _ = await n2.finish()
                // Sampled until the last completes: no node ever runs more than its -j.
                #expect(
                    try await waitUntil {
                        guard try await running().isEmpty else { return false }
                        return try await fleet.clients[1].tasks().allSatisfy { $0.state == .completed }
                    }
                )
                #expect(most.withLock { $0 }.values.allSatisfy { $0 <= 2 }, "\(most.withLock { $0 })")
                // Whole and fetched in full once each; n2's two went on elsewhere with ranged requests.
                let log = try await FleetDaemonTests.expectAllWholeOnce(fleet, files: 60)
                for task in held {
                    guard let index = tasks.firstIndex(where: { $0.id == task.id }) else { continue }
                    #expect(log.contains { $0[0] == "/slow/f\(index)" && $0[2].hasPrefix("bytes=") && $0[1] == "206" })
                }
                let completions = try await fleet.clients[0].loggedEvents(session: "fleet").filter {
                    $0.kind == .completed
                }
                #expect(completions.count == 60 && Set(completions.compactMap(\.taskID)).count == 60)
            }
        }

        @Test("kill -9 of one daemon mid-way: its downloads finish on the others, resumed at their committed offsets")
        func killNine() async throws {
            try await FleetDaemonTests.withFleet(
                files: 12,
                size: 2 << 20,
                rate: "512k",
                limit: 6,
                perHost: 6,
                initially: 1
            ) { fleet in
                let requests = (0..<12).map { index in
                    DownloadRequest(
                        url: fleet.nginx.url("/slow/f\(index)"),
                        destination: .directory(fleet.out),
                        session: "fleet"
                    )
                }
                let tasks = try await fleet.clients[0].add(requests)
                let location = try PostgresLocation(parsing: fleet.store)
                guard let server = PostgresServer.current else { return }
                try await server.withClient(database: location.database) { db in
                    // n0 alone takes the first six; once they have bytes committed, n1 and n2
                    // join, and n0 dies.
                    var held: [UUID] = []
                    #expect(
                        try await waitUntil(timeout: .seconds(60)) {
                            held = try await db.query(
                                """
                                SELECT t.id FROM haul_task t WHERE t.owner = 'n0' AND t.state = 'running'
                                    AND (SELECT SUM(s.committed - s.start) FROM haul_segment s WHERE s."taskID" = t.id) > 0
                                """
                            ).decode(UUID.self).collected()
                            return !held.isEmpty
                        }
                    )
                    try await fleet.start(1)
                    try await fleet.start(2)
                    let n0 = try #require(fleet.daemon(0))
                    n0.kill(SIGKILL)
                    _ = await n0.finish()
                    // The server may still be committing what n0 sent before it died: once n0's
                    // connections are gone there, nothing of n0's can move.
                    #expect(
                        try await waitUntil {
                            try await db.query(
                                "SELECT count(*)::bigint FROM pg_stat_activity WHERE application_name = 'haul n0'"
                            ).decode(Int64.self).collected().first == 0
                        }
                    )
                    // What n0 committed before it died.
                    var committed: [UUID: Int64] = [:]
                    for id in held {
                        committed[id] = try await db.query(
                            "SELECT COALESCE(SUM(committed - start), 0)::bigint FROM haul_segment WHERE \"taskID\" = \(id)"
                        ).decode(Int64.self).collected().first
                    }
                    #expect(
                        try await waitUntil(timeout: .seconds(180)) {
                            let infos = try await fleet.clients[1].tasks()
                            return infos.count == 12 && infos.allSatisfy { $0.state == .completed }
                        }
                    )
                    for index in 0..<12 {
                        #expect(
                            FleetDaemonTests.sha256("\(fleet.out)/f\(index)")
                                == FleetDaemonTests.sha256("\(fleet.nginx.root)/f\(index)")
                        )
                    }
                    // Each of n0's downloads went on elsewhere from its committed offset.
                    let log = fleet.nginx.accessLog()
                    for id in held {
                        guard let index = tasks.firstIndex(where: { $0.id == id }), let offset = committed[id] else {
                            Issue.record("task \(id) unknown")
                            continue
                        }
                        let ranges = log.filter { $0[0] == "/slow/f\(index)" }.map { $0[2] }
                        // (Haul asks again for the last bytes before the offset, to check them.)
                        #expect(ranges.contains(resumeRange(from: offset)), "f\(index): \(ranges), committed \(offset)")
                    }
                    let completions = try await fleet.clients[2].loggedEvents(session: "fleet").filter {
                        $0.kind == .completed
                    }
                    #expect(completions.count == 12 && Set(completions.compactMap(\.taskID)).count == 12)
                }
            }
        }
    }
}
