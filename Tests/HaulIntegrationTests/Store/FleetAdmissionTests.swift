import Testing

@testable import HaulPostgres

/// How many leases a node takes, weighed without a database (``FleetAdmission/Room``): its
/// own capacity, the fleet's caps, and its part of the work by free capacity.
@Suite("Fleet admission: a node's room")
struct FleetAdmissionTests {
    typealias Room = FleetAdmission.Room

    @Test("with work for everyone, a node fills its own capacity and no more; the fleet's cap bounds it")
    func ownCapacity() {
        var room = Room(node: "n", capacity: 2, perHost: 8)
        room.waiting = 60
        room.others = ["m": 4]
        #expect(room.leases(wanted: 10) == 2)
        room.mine = ["h": 1]
        room.running = ["h": 1]
        #expect(room.leases(wanted: 10) == 1)
        room.mine = ["h": 2]
        room.running = ["h": 2]
        #expect(room.leases(wanted: 10) == 0)
        // Capped at 6 over the fleet, 5 running elsewhere: one more, whatever the node's own room.
        room = Room(node: "n", capacity: 4, perHost: 8, fleetCap: 6, running: ["h": 5])
        room.waiting = 60
        #expect(room.leases(wanted: 4) == 1)
        room.running = ["h": 7]  // Over the cap (lowered meanwhile): nothing.
        #expect(room.leases(wanted: 4) == 0)
    }

    @Test("with less work than room, each node takes its part by free capacity")
    func parts() {
        // 3 waiting, this node 2 free of 6 free in all (three nodes at 2): one.
        var room = Room(node: "n", capacity: 2, perHost: 8)
        room.others = ["m": 2, "o": 2]
        room.waiting = 3
        #expect(room.leases(wanted: 2) == 1)
        // The fleet capped at 3, three nodes at 4: one each, though 60 wait.
        room = Room(node: "n", capacity: 4, perHost: 8, fleetCap: 3)
        room.others = ["m": 4, "o": 4]
        room.waiting = 60
        #expect(room.leases(wanted: 4) == 1)
        // Alone: all of it.
        room = Room(node: "n", capacity: 4, perHost: 8)
        room.waiting = 3
        #expect(room.leases(wanted: 4) == 3)
        // Nothing waits: nothing.
        room.waiting = 0
        #expect(room.leases(wanted: 4) == 0)
        // Counted up to the fleet's free room (4 here, 8 on the others): as much as it has.
        room = Room(node: "n", capacity: 4, perHost: 8, mine: ["h": 1])
        room.others = ["m": 4, "o": 4]
        room.waiting = 12
        #expect(room.leases(wanted: 4) == 3)
        room.waiting = 10  // Fewer than the free room (11): 2 whole of 3 × 10 / 11, and a remainder's.
        #expect(room.leases(wanted: 4) == 3)
        room.waiting = 5  // 1 whole; the two tasks left go to the others' larger remainders.
        #expect(room.leases(wanted: 4) == 1)
        // Past the count, work for every node.
        room = Room(node: "n", capacity: 4, perHost: 8)
        room.others = ["m": 100_000]
        room.waiting = FleetAdmission.countedWaiting
        #expect(room.leases(wanted: 4) == 4)
    }

    @Test("the node that asks again first does not take another node's part: three at -j 4 under a fleet cap of 3")
    func askingAgainFirst() {
        // b leased one and asks again before a has asked at all: the one left is a's (4 free
        // against b's 3), not b's — before, b's part was rounded up to one, and b took two.
        var b = Room(node: "b", capacity: 4, perHost: 8, fleetCap: 3, running: ["h": 1], mine: ["h": 1])
        b.others = ["a": 4, "c": 4]
        b.waiting = 11
        #expect(b.leases(wanted: 3) == 0)
        var a = Room(node: "a", capacity: 4, perHost: 8, fleetCap: 3, running: ["h": 1])
        a.others = ["b": 3, "c": 4]
        a.waiting = 11
        #expect(a.leases(wanted: 4) == 1)
        // Then c, the last with room: the last one.
        var c = Room(node: "c", capacity: 4, perHost: 8, fleetCap: 3, running: ["h": 2])
        c.others = ["a": 3, "b": 3]
        c.waiting = 10
        #expect(c.leases(wanted: 4) == 1)
        b.running = ["h": 3]
        #expect(b.leases(wanted: 3) == 0)
        // Overdue (given nothing for a lease's time while it wanted work), b takes one of what
        // waits though it is a's part; never past the fleet's cap.
        b.running = ["h": 1]
        b.overdue = true
        #expect(b.leases(wanted: 3) == 1)
        b.running = ["h": 3]
        #expect(b.leases(wanted: 3) == 0)
        b.waiting = 0
        b.running = ["h": 1]
        #expect(b.leases(wanted: 3) == 0)
    }

    @Test(
        "parts by free capacity add up to the work, whole parts first, then the largest remainders, the most free, the first name"
    )
    func partsAddUp() {
        let nodes = ["a": 4, "b": 3, "c": 4, "d": 0, "e": 1]
        for available in 0...12 {
            let parts = nodes.keys.map { FleetAdmission.part(of: available, among: nodes, for: $0) }
            #expect(parts.reduce(0, +) == available, "\(available)")
        }
        // One task: the most free, then the first name.
        #expect(FleetAdmission.part(of: 1, among: nodes, for: "a") == 1)
        #expect(FleetAdmission.part(of: 1, among: nodes, for: "c") == 0)
        // Two: a and c (remainder 8 of 12 each), not b (6) nor e (2); none for a node with none free.
        #expect(FleetAdmission.part(of: 2, among: nodes, for: "c") == 1)
        #expect(FleetAdmission.part(of: 2, among: nodes, for: "b") == 0)
        #expect(FleetAdmission.part(of: 12, among: nodes, for: "d") == 0)
        #expect(FleetAdmission.part(of: 3, among: nodes, for: "unknown") == 0)
        // Capacities at the limits of the integers do not trap.
        let huge = ["a": Int.max / 2, "b": Int.max / 2]
        #expect(FleetAdmission.part(of: Int.max / 2, among: huge, for: "a") == Int.max / 4 + 1)
    }

    @Test("a host takes a node's own per-host limit and the fleet's per-host cap")
    func hosts() {
        var room = Room(node: "n", capacity: 8, perHost: 2, fleetPerHost: 3, running: ["a": 2], mine: ["a": 1])
        let taken = [room.admits("a"), room.admits("a")]
        #expect(taken == [true, false])  // Then mine 2 of 2, the fleet's 3 of 3.
        let other = [room.admits("b"), room.admits("b"), room.admits("b")]
        #expect(other == [true, true, false])  // Its own limit.
        room.running["c"] = 3
        let capped = room.admits("c")
        #expect(!capped)  // The fleet's cap.
    }

    @Test("the fleet's rate cap: an even part for each node transferring, a slower node's rest to the others")
    func rateShares() {
        let mib: Int64 = 1 << 20
        #expect(FleetAdmission.rateShare(cap: 9 * mib, own: nil, others: [nil, nil]) == 3 * mib)
        #expect(FleetAdmission.rateShare(cap: 9 * mib, own: nil, others: []) == 9 * mib)
        // Another node's link carries 1 MiB/s: the other 8 are for this one and the third.
        #expect(FleetAdmission.rateShare(cap: 9 * mib, own: nil, others: [mib, nil]) == 4 * mib)
        // This node's own link is the slower: its own limit.
        #expect(FleetAdmission.rateShare(cap: 9 * mib, own: 2 * mib, others: [nil]) == 2 * mib)
        #expect(FleetAdmission.rateShare(cap: 9 * mib, own: 6 * mib, others: [6 * mib]) == 9 * mib / 2)
        // Never 0, however many share a small cap.
        #expect(FleetAdmission.rateShare(cap: 2, own: nil, others: [nil, nil, nil]) == 1)
    }
}
