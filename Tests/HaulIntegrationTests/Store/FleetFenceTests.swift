import Foundation
import HaulTestSupport
import HaulTesting
import Logging
import PostgresNIO
import Synchronization
import Testing

@testable import Haul
@testable import HaulPostgres

extension FleetQueueTests {
    /// Writes fenced by the lease, leases lost to another node or given back, and a dead node's waiting tasks.
    @Suite("Fleet queue: fences and leases handed on")
    struct Fences {
        @Test("fencing: a node past its lease writes nothing once another took over; the new holder's writes count")
        func fencing() async throws {
            try await FleetQueueTests.withDatabase { client in
                let a = try await FleetQueueTests.node(client, "a")
                let b = try await FleetQueueTests.node(client, "b")
                let id = try #require(try await FleetQueueTests.add(a, 1).first)
                #expect(try await a.claim(wanted: 1, maxRunning: 5, perHost: 5) == [id])
                let segment = { (committed: Int64) in
                    [SegmentRecord(taskID: id, ordinal: 0, start: 0, committed: committed)]
                }
                try await a.checkpoint(id, segments: segment(1000))
                // B takes nothing while A's lease holds.
                #expect(try await b.claim(wanted: 1, maxRunning: 5, perHost: 5).isEmpty)
                // A stalls past its lease (as SIGSTOP would leave it: its lease has run out by the
                // database's clock); B takes the task with the next fence.
                try await client.query(
                    "UPDATE haul_task SET lease_expires = now() - interval '1 second' WHERE id = \(id)"
                )
                #expect(try await b.claim(wanted: 1, maxRunning: 5, perHost: 5) == [id])
                // A wakes up: every write it tries about the task is refused and changes nothing —
                // a response (its fence checked by the write's own statement), then a checkpoint.
                var response = try #require(try await a.task(id: id))
                response.totalLength = 9_999
                let refused = await #expect(throws: HaulError.self) {
                    try await a.saveResponse(response, segments: segment(5000))
                }
                #expect(refused?.code == .revoked)
                #expect(try await a.task(id: id)?.totalLength != 9_999)
                let lost = await #expect(throws: HaulError.self) { try await a.checkpoint(id, segments: segment(5000)) }
                #expect(lost?.code == .revoked)
                #expect(lost?.message.contains("This node (a) no longer holds task") == true)
                #expect(!a.holdsClaim(id))
                #expect(try await a.leases.heartbeat(bytesPerSecond: 0).isEmpty)
                var entry = try #require(try await a.fleet.report.entries().first)
                #expect(entry.owner == "b" && entry.state == "running" && entry.committed == 1000 && entry.fence == 2)
                // B's writes count; its end frees the row.
                try await b.checkpoint(id, segments: segment(2000))
                #expect(try await b.leases.heartbeat(bytesPerSecond: 0).isEmpty, "b still holds it")
                try await b.setState(id, .completed)
                entry = try #require(try await a.fleet.report.entries().first)
                #expect(entry.state == "completed" && entry.committed == 2000 && entry.owner == nil)
                #expect(!b.holdsClaim(id))
            }
        }

        @Test(
            "a lease is lost when the task is paused elsewhere: its heartbeat says so, and its next write is refused"
        )
        func pausedElsewhere() async throws {
            try await FleetQueueTests.withDatabase { client in
                let (a, b) = (try await FleetQueueTests.node(client, "a"), try await FleetQueueTests.node(client, "b"))
                let id = try #require(try await FleetQueueTests.add(a, 1).first)
                #expect(try await a.claim(wanted: 1, maxRunning: 5, perHost: 5) == [id])
                // A user at node b pauses it.
                try await b.setState(id, .paused)
                #expect(try await a.leases.heartbeat(bytesPerSecond: 0) == [id])
                // A's stopping transfer records "queued": refused, so the pause stands.
                let refused = await #expect(throws: HaulError.self) { try await a.setState(id, .queued) }
                #expect(refused?.code == .revoked)
                #expect(try await b.task(id: id)?.state == .paused)
                #expect(!a.holdsClaim(id))
                // And so is every later write of that run (a segment's last checkpoint, its
                // "queued" again), until the run has ended here.
                let segments = [SegmentRecord(taskID: id, ordinal: 0, start: 0, committed: 9)]
                let again = await #expect(throws: HaulError.self) { try await a.checkpoint(id, segments: segments) }
                #expect(again?.code == .revoked)
                await #expect(throws: HaulError.self) { try await a.setState(id, .queued) }
                #expect(try await b.task(id: id)?.state == .paused)
                #expect(try await b.fleet.report.entries().first?.committed == 0)
                // Resumed elsewhere while the run here is still stopping: that run cannot take
                // the task back; another node can.
                _ = try await b.requeue(id, state: .queued)
                #expect(try await a.claim(wanted: 1, maxRunning: 5, perHost: 5).isEmpty)
                a.runEnded(id)
                #expect(try await a.claim(wanted: 1, maxRunning: 5, perHost: 5) == [id])
                #expect(try await b.fleet.report.entries().first?.fence == 2)
            }
        }

        @Test(
            "a task waiting to be tried again by a node that died is queued again two leases past its time, not before"
        )
        func retryingOfADeadNode() async throws {
            try await FleetQueueTests.withDatabase { client in
                // Node a's lease outlasts any pause of a loaded machine between its writes (a run
                // under load once took 49 s, and a 5 s lease ran out before a's second write).
                let (a, b) = (
                    try await FleetQueueTests.node(client, "a", lease: .seconds(300)),
                    try await FleetQueueTests.node(client, "b")
                )
                let ids = try await FleetQueueTests.add(a, 2)
                #expect(try await a.claim(wanted: 2, maxRunning: 5, perHost: 5) == ids)
                // Node a set both to be tried again — one due 2 minutes ago, one due now — then died.
                try await a.setRetrying(ids[0], error: "503", nextTryAt: Date() - 120, since: Date() - 200)
                try await a.setRetrying(ids[1], error: "503", nextTryAt: Date(), since: Date() - 200)
                // c, with 30 s leases: the first is more than two leases overdue, so c takes it; the
                // second waits for its own node's timer (or its time to pass two leases, a minute).
                let c = try await FleetQueueTests.node(client, "c", lease: .seconds(30))
                #expect(try await c.claim(wanted: 5, maxRunning: 5, perHost: 5) == [ids[0]])
                #expect(try await b.task(id: ids[1])?.state == .retrying)
                #expect(try await b.fleet.report.entries().first { $0.id == ids[0] }?.owner == "c")
            }
        }

        @Test(
            "a finished file is placed under the lease: a cancel from elsewhere lands before (nothing placed) or after (refused: it completed)"
        )
        func placingIsFenced() async throws {
            try await FleetQueueTests.withDatabase { client in
                let (a, b) = (try await FleetQueueTests.node(client, "a"), try await FleetQueueTests.node(client, "b"))
                let ids = try await FleetQueueTests.add(a, 2)
                #expect(try await a.claim(wanted: 2, maxRunning: 5, perHost: 5) == ids)
                let placed = PlacedFiles()

                // Cancelled elsewhere first: the file is not placed, the cancel stands.
                try await b.setState(ids[0], .cancelled)
                let refused = await #expect(throws: HaulError.self) {
                    try await a.placeFinished(ids[0], completing: nil) { placed.add(ids[0]) }
                }
                #expect(refused?.code == .revoked && placed.all.isEmpty)
                #expect(try await b.task(id: ids[0])?.state == .cancelled)

                // A cancel decided before the placement, written while it is under way (the row
                // locked): it waits for the commit, then is refused.
                let late = Mutex<Task<Void, any Error>?>(nil)
                try await a.placeFinished(ids[1], completing: nil) {
                    placed.add(ids[1])
                    late.withLock { $0 = Task { try await b.setState(ids[1], .cancelled) } }
                }
                let cancel = try #require(late.withLock { $0 })
                let tooLate = await #expect(throws: HaulError.self) { try await cancel.value }
                #expect(tooLate?.code == .invalidArgument && tooLate?.message.contains("completed meanwhile") == true)
                #expect(placed.all == [ids[1]])
                let task = try await b.task(id: ids[1])
                #expect(task?.state == .completed && task?.partPath == nil)
                #expect(try await b.fleet.report.entries().map(\.owner) == [nil, nil])
                // The full completion that follows is a's to record.
                try await a.checkpoint(
                    ids[1],
                    segments: [SegmentRecord(taskID: ids[1], ordinal: 0, start: 0, committed: 7)]
                )
            }
        }

        @Test(
            "a placement is waited for even when the lease's time in this node's book runs out meanwhile: the database's fence decides, and the run learns it completed"
        )
        func slowPlacementCompletes() async throws {
            try await FleetQueueTests.withDatabase { client in
                let clock = TestClock()
                let lease = Duration.seconds(60)
                let a = try await FleetQueueTests.node(client, "a", lease: lease, clock: clock)
                let ids = try await FleetQueueTests.add(a, 1)
                #expect(try await a.claim(wanted: 1, maxRunning: 5, perHost: 5) == ids)
                // The node's book says the lease ran out (a heartbeat late under load); the
                // database, whose clock has not moved, still grants it. A placement given up on at
                // the book's time would still commit, and its run would report a revoked claim for
                // a task the store calls completed, whose completion nobody then tells.
                clock.advance(by: lease + .seconds(1))
                let placed = PlacedFiles()
                try await a.placeFinished(ids[0], completing: nil) { placed.add(ids[0]) }
                #expect(placed.all == ids)
                #expect(try await a.task(id: ids[0])?.state == .completed)
                #expect(try await a.fleet.report.entries().map(\.owner) == [nil])
            }
        }

        final class PlacedFiles: Sendable {
            private let ids = Mutex<[UUID]>([])
            func add(_ id: UUID) { ids.withLock { $0.append(id) } }
            var all: [UUID] { ids.withLock { $0 } }
        }

        @Test("a node stopping cleanly gives its leases back: another takes them at once, in their places")
        func release() async throws {
            try await FleetQueueTests.withDatabase { client in
                let (a, b) = (try await FleetQueueTests.node(client, "a"), try await FleetQueueTests.node(client, "b"))
                let ids = try await FleetQueueTests.add(a, 3)
                #expect(try await a.claim(wanted: 2, maxRunning: 2, perHost: 2) == Array(ids[0..<2]))
                // b has room of its own: it takes what is left.
                #expect(try await b.claim(wanted: 2, maxRunning: 2, perHost: 2) == [ids[2]])
                try await a.giveBackAll()
                #expect(!a.holdsClaim(ids[0]))
                #expect(try await b.claim(wanted: 2, maxRunning: 3, perHost: 3) == Array(ids[0..<2]))
                #expect(try await b.fleet.report.entries().prefix(2).map(\.fence) == [2, 2])
            }
        }
    }
}
