import Testing

@testable import HaulPostgres

/// How many leases a node takes, weighed without a database (``FleetAdmission/Room``): its
/// own capacity, the fleet's caps, and its part of the work by free capacity.
@Suite("Fleet admission: a node's room")
struct FleetAdmissionTests {
    typealias Room = FleetAdmission.Room

    @Test("with work for everyone, a node fills its own capacity and no more; the fleet's cap bounds it")
    func ownCapacity() {
        var room = Room(capacity: 2, perHost: 8)
        room.waiting = 60
        room.othersFree = 4
        #expect(room.leases(wanted: 10) == 2)
        room.mine = ["h": 1]
        room.running = ["h": 1]
        #expect(room.leases(wanted: 10) == 1)
        room.mine = ["h": 2]
        room.running = ["h": 2]
        #expect(room.leases(wanted: 10) == 0)
        // Capped at 6 over the fleet, 5 running elsewhere: one more, whatever the node's own room.
        room = Room(capacity: 4, perHost: 8, fleetCap: 6, running: ["h": 5])
        room.waiting = 60
        #expect(room.leases(wanted: 4) == 1)
        room.running = ["h": 7]  // Over the cap (lowered meanwhile): nothing.
        #expect(room.leases(wanted: 4) == 0)
    }

    @Test("with less work than room, each node takes its part by free capacity, at least one")
    func parts() {
        // 3 waiting, this node 2 free of 6 free in all: one.
        var room = Room(capacity: 2, perHost: 8)
        room.othersFree = 4
        room.waiting = 3
        #expect(room.leases(wanted: 2) == 1)
        // The fleet capped at 3, three nodes at 4: one each, though 60 wait.
        room = Room(capacity: 4, perHost: 8, fleetCap: 3)
        room.othersFree = 8
        room.waiting = 60
        #expect(room.leases(wanted: 4) == 1)
        // Alone: all of it.
        room = Room(capacity: 4, perHost: 8)
        room.waiting = 3
        #expect(room.leases(wanted: 4) == 3)
        // Nothing waits: nothing.
        room.waiting = 0
        #expect(room.leases(wanted: 4) == 0)
        // Counted up to the fleet's free room (4 here, 8 on the others): as much as it has.
        room = Room(capacity: 4, perHost: 8, mine: ["h": 1])
        room.othersFree = 8
        room.waiting = 12
        #expect(room.leases(wanted: 4) == 3)
        room.waiting = 10  // Fewer than the free room (11): its part, 3 × 10 / 11 rounded up.
        #expect(room.leases(wanted: 4) == 3)
        room.waiting = 5
        #expect(room.leases(wanted: 4) == 2)
        // Past the count, work for every node.
        room = Room(capacity: 4, perHost: 8)
        room.othersFree = 100_000
        room.waiting = FleetAdmission.countedWaiting
        #expect(room.leases(wanted: 4) == 4)
    }

    @Test("a host takes a node's own per-host limit and the fleet's per-host cap")
    func hosts() {
        var room = Room(capacity: 8, perHost: 2, fleetPerHost: 3, running: ["a": 2], mine: ["a": 1])
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
