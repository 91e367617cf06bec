import Foundation
import HaulClient
import HaulTestSupport
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

@Suite("Task state machine", .timeLimit(.minutes(10)))
struct TaskStateMachineTests {
    typealias Event = TaskStateMachine.Event

    @Test("the legal moves, exactly")
    func legalMoves() {
        var legal: [String] = []
        for state in TaskState.allCases {
            for event in Event.allCases {
                if let next = TaskStateMachine.next(from: state, on: event) {
                    legal.append("\(state.rawValue) -\(event.rawValue)-> \(next.rawValue)")
                }
            }
        }
        #expect(
            legal.sorted() == [
                "failed -cancel-> cancelled", "failed -resume-> queued",
                "paused -cancel-> cancelled", "paused -resume-> queued",
                "queued -cancel-> cancelled", "queued -pause-> paused", "queued -start-> running",
                "retrying -cancel-> cancelled", "retrying -pause-> paused", "retrying -resume-> queued",
                "retrying -retryDue-> queued",
                "running -cancel-> cancelled", "running -complete-> completed", "running -fail-> failed",
                "running -offline-> waitingForNetwork", "running -pause-> paused", "running -recover-> queued",
                "running -retryLater-> retrying", "running -yield-> queued",
                "waitingForNetwork -cancel-> cancelled", "waitingForNetwork -giveUp-> failed",
                "waitingForNetwork -online-> queued",
                "waitingForNetwork -pause-> paused", "waitingForNetwork -resume-> queued",
            ]
        )
    }

    @Test("a whole life: queued, running, yielded, running, paused, resumed, running, completed")
    func lifeInOrder() throws {
        var machine = TaskStateMachine()
        var states = [machine.state]
        for event: Event in [.start, .yield, .start, .pause, .resume, .start, .complete] {
            states.append(try machine.handle(event))
        }
        #expect(states == [.queued, .running, .queued, .running, .paused, .queued, .running, .completed])
    }

    @Test(
        "illegal moves throw and change nothing",
        arguments: [
            (TaskState.completed, Event.start), (.completed, .resume), (.completed, .cancel), (.cancelled, .resume),
            (.cancelled, .start), (.paused, .start), (.paused, .complete), (.queued, .complete), (.queued, .resume),
            (.failed, .start), (.running, .start),
        ]
    )
    func illegalMoves(state: TaskState, event: Event) {
        var machine = TaskStateMachine(state)
        #expect(throws: TaskStateMachine.IllegalTransition(from: state, event: event)) { try machine.handle(event) }
        #expect(machine.state == state)
    }
}

@Suite("Scheduling order", .timeLimit(.minutes(10)))
struct SchedulerTests {
    /// Named tasks so expected orders read like the examples of docs/architecture.md.
    struct Names {
        private var ids: [String: UUID] = [:]
        private var names: [UUID: String] = [:]
        private var order: Int64 = 0

        mutating func entry(_ name: String, host: String = "a.example", priority: Int = 0) -> Scheduler.Entry {
            let id = UUID()
            ids[name] = id
            names[id] = name
            order += 1
            return .init(id: id, host: host, priority: priority, queueOrder: order)
        }

        /// A fresh queue position for `name` (a resumed task goes to the back).
        mutating func requeue(_ name: String, host: String = "a.example") -> Scheduler.Entry {
            order += 1
            return .init(id: ids[name]!, host: host, priority: 0, queueOrder: order)
        }

        func id(_ name: String) -> UUID { ids[name]! }
        func names(_ list: [UUID]) -> [String] { list.map { names[$0]! } }
    }

    @Test("waiting tasks start oldest first; when one ends, the oldest waiting starts")
    func oldestFirst() {
        var n = Names()
        var scheduler = Scheduler(maxConcurrent: 2, perHostLimit: 10)
        for name in ["A", "B", "C", "D"] { scheduler.enqueue(n.entry(name)) }
        #expect(n.names(scheduler.admit()) == ["A", "B"])
        #expect(n.names(scheduler.waitingIDs) == ["C", "D"])
        scheduler.remove(n.id("B"))
        #expect(n.names(scheduler.admit()) == ["C"])
        scheduler.remove(n.id("A"))
        #expect(n.names(scheduler.admit()) == ["D"])
        #expect(scheduler.admit().isEmpty)
    }

    @Test("the design's example: 5 running, limit lowered to 2 — the 3 newest wait, the oldest of them starts next")
    func lowerLimit() {
        var n = Names()
        var scheduler = Scheduler(maxConcurrent: 5, perHostLimit: 10)
        for name in ["A", "B", "C", "D", "E", "F"] { scheduler.enqueue(n.entry(name)) }
        #expect(n.names(scheduler.admit()) == ["A", "B", "C", "D", "E"])
        #expect(n.names(scheduler.setMaxConcurrent(2)) == ["E", "D", "C"])
        #expect(n.names(scheduler.runningIDs) == ["A", "B"])
        #expect(n.names(scheduler.waitingIDs) == ["C", "D", "E", "F"])
        #expect(scheduler.admit().isEmpty)
        scheduler.remove(n.id("A"))
        #expect(n.names(scheduler.admit()) == ["C"])
    }

    @Test("raising the limit starts the oldest waiting")
    func raiseLimit() {
        var n = Names()
        var scheduler = Scheduler(maxConcurrent: 1, perHostLimit: 10)
        for name in ["A", "B", "C", "D"] { scheduler.enqueue(n.entry(name)) }
        #expect(n.names(scheduler.admit()) == ["A"])
        #expect(scheduler.setMaxConcurrent(3).isEmpty)
        #expect(n.names(scheduler.admit()) == ["B", "C"])
        #expect(n.names(scheduler.waitingIDs) == ["D"])
    }

    @Test("a priority moves a task ahead of older ones; equal priorities keep queue order")
    func priority() {
        var n = Names()
        var scheduler = Scheduler(maxConcurrent: 1, perHostLimit: 10)
        scheduler.enqueue(n.entry("A"))
        scheduler.enqueue(n.entry("B"))
        scheduler.enqueue(n.entry("C", priority: 5))
        scheduler.enqueue(n.entry("D"))
        scheduler.enqueue(n.entry("E", priority: 5))
        #expect(n.names(scheduler.admit()) == ["C"])
        #expect(n.names(scheduler.waitingIDs) == ["E", "A", "B", "D"])
    }

    @Test("pause and resume at the limit: the resumed task queues anew at the back")
    func pauseResumeAtLimit() {
        var n = Names()
        var scheduler = Scheduler(maxConcurrent: 2, perHostLimit: 10)
        for name in ["A", "B", "C", "D"] { scheduler.enqueue(n.entry(name)) }
        #expect(n.names(scheduler.admit()) == ["A", "B"])
        scheduler.remove(n.id("A"))  // paused
        #expect(n.names(scheduler.admit()) == ["C"])
        scheduler.enqueue(n.requeue("A"))  // resumed
        #expect(n.names(scheduler.waitingIDs) == ["D", "A"])
        scheduler.remove(n.id("B"))
        #expect(n.names(scheduler.admit()) == ["D"])
        scheduler.remove(n.id("C"))
        #expect(n.names(scheduler.admit()) == ["A"])
    }

    @Test("the per-host cap holds back a host without holding back others")
    func perHostCap() {
        var n = Names()
        var scheduler = Scheduler(maxConcurrent: 4, perHostLimit: 2)
        scheduler.enqueue(n.entry("A", host: "one"))
        scheduler.enqueue(n.entry("B", host: "one"))
        scheduler.enqueue(n.entry("C", host: "one"))
        scheduler.enqueue(n.entry("D", host: "two"))
        #expect(n.names(scheduler.admit()) == ["A", "B", "D"])
        #expect(n.names(scheduler.waitingIDs) == ["C"])
        scheduler.remove(n.id("A"))
        #expect(n.names(scheduler.admit()) == ["C"])
    }

    @Test("lowering the per-host cap yields that host's newest tasks only")
    func lowerPerHostCap() {
        var n = Names()
        var scheduler = Scheduler(maxConcurrent: 10, perHostLimit: 3)
        for (name, host) in [("A", "one"), ("B", "two"), ("C", "one"), ("D", "one"), ("E", "two")] {
            scheduler.enqueue(n.entry(name, host: host))
        }
        #expect(n.names(scheduler.admit()) == ["A", "B", "C", "D", "E"])
        #expect(n.names(scheduler.setPerHostLimit(1)) == ["E", "D", "C"])
        #expect(n.names(scheduler.runningIDs) == ["A", "B"])
        #expect(n.names(scheduler.waitingIDs) == ["C", "D", "E"])
    }

    @Test("no hidden clamp: any limit of 1 or more holds", arguments: [1, 7, 64, 500])
    func anyLimit(limit: Int) {
        var n = Names()
        var scheduler = Scheduler(maxConcurrent: limit, perHostLimit: 1000)
        for index in 0..<(limit + 3) { scheduler.enqueue(n.entry("T\(index)")) }
        #expect(scheduler.admit().count == limit)
        #expect(scheduler.waitingIDs.count == 3)
    }

    @Test(
        "a long line (4,000, random priorities, hosts, removals with and without their entries, equal ranks): the order of a plain sorted list"
    )
    func longLine() async {
        // Thousands of steps against a reference kept by linear scans: off the pool.
        let (waiting, expected, started, reference, removals) = await offCooperativePool {
            var generator = SeededGenerator(state: 35)
            var scheduler = Scheduler(maxConcurrent: 8, perHostLimit: 3)
            // The reference: the line sorted by priority, then queue order, then as added.
            var line: [(entry: Scheduler.Entry, added: Int)] = []
            var (added, removals) = (0, [Bool]())
            func enqueue(_ entry: Scheduler.Entry) {
                line.removeAll { $0.entry.id == entry.id }
                line.append((entry, added))
                added += 1
                scheduler.enqueue(entry)
            }
            for index in 0..<4_000 {
                let host = "h\(Int.random(in: 0..<5, using: &generator))"
                let priority = Int.random(in: -2...2, using: &generator)
                // Equal ranks too: three tasks a queue position.
                enqueue(.init(id: UUID(), host: host, priority: priority, queueOrder: Int64(index / 3)))
                if index % 7 == 0, let victim = line.randomElement(using: &generator) {
                    // Found by its entry (binary search), by a look along the line, or past a
                    // stale entry (another rank): the same task leaves.
                    var stale = victim.entry
                    stale.priority = -9
                    let hint: Scheduler.Entry? = [victim.entry, nil, stale][index % 3]
                    removals.append(scheduler.remove(victim.entry.id, hint: hint))
                    line.removeAll { $0.entry.id == victim.entry.id }
                }
                if index % 11 == 0, var moved = line.randomElement(using: &generator)?.entry {
                    moved.priority = 3
                    enqueue(moved)  // Again at a new place: the old one forgotten.
                }
            }
            removals.append(!scheduler.remove(UUID()))
            let expected = line.sorted { a, b in
                if a.entry.priority != b.entry.priority { return a.entry.priority > b.entry.priority }
                if a.entry.queueOrder != b.entry.queueOrder { return a.entry.queueOrder < b.entry.queueOrder }
                return a.added < b.added
            }
            removals.append(expected.allSatisfy { scheduler.isWaiting($0.entry.id) })
            let waiting = scheduler.waitingIDs
            // Admitted in that order, at most 3 a host and 8 in all: a full host is passed over.
            var perHost: [String: Int] = [:]
            let reference = expected.filter { item in
                guard perHost[item.entry.host, default: 0] < 3, perHost.values.reduce(0, +) < 8 else { return false }
                perHost[item.entry.host, default: 0] += 1
                return true
            }
            return (waiting, expected.map(\.entry.id), scheduler.admit(), reference.map(\.entry.id), removals)
        }
        #expect(waiting == expected)
        #expect(started == reference)
        #expect(!removals.isEmpty && removals.allSatisfy { $0 })
    }
}
