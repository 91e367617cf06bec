import Foundation
import Testing

@testable import Haul

/// Long random sequences of what happens to tasks — added, admitted, ended, paused,
/// resumed, limits lowered and raised — driven through the scheduler and each task's state
/// machine together, as the manager drives them; after every event the invariants hold:
/// the limits, one place per task that matches its state, a line in start order, and no
/// waiting task that could start. Seeded, so a failure names the sequence that shows it.
@Suite("Scheduler invariants under random events", .timeLimit(.minutes(2)))
struct SchedulerInvariantTests {
    /// SplitMix64: a small generator whose sequence a seed fixes.
    struct SeededGenerator: RandomNumberGenerator {
        var state: UInt64

        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// The tasks as the manager keeps them: the scheduler, and each task's machine and entry.
    struct Model {
        var scheduler: Scheduler
        var machines: [UUID: TaskStateMachine] = [:]
        /// The tasks in the order they were added (a seed then picks the same ones).
        var added: [UUID] = []
        var entries: [UUID: Scheduler.Entry] = [:]
        var nextOrder: Int64 = 0
        /// Every task the scheduler started, with the state it started from.
        var startedFrom: [TaskState] = []

        init(maxConcurrent: Int, perHost: Int) {
            scheduler = Scheduler(maxConcurrent: maxConcurrent, perHostLimit: perHost)
        }

        mutating func admitAndStart() throws {
            for id in scheduler.admit() {
                startedFrom.append(machines[id]?.state ?? .completed)
                try machines[id]?.handle(.start)
            }
        }

        mutating func queue(_ id: UUID, host: String, priority: Int) {
            nextOrder += 1
            let entry = Scheduler.Entry(id: id, host: host, priority: priority, queueOrder: nextOrder)
            entries[id] = entry
            scheduler.enqueue(entry)
        }

        mutating func yield(_ ids: [UUID]) throws {
            for id in ids { try machines[id]?.handle(.yield) }
        }
    }

    static let hosts = ["a:80", "b:80", "c:443"]

    /// Applies one random event to `model`.
    static func step(_ model: inout Model, _ random: inout SeededGenerator) throws {
        let pick = model.added.isEmpty ? nil : model.added[Int.random(in: 0..<model.added.count, using: &random)]
        switch Int.random(in: 0..<10, using: &random) {
        case 0, 1:
            let id = UUID()
            model.machines[id] = TaskStateMachine(.queued)
            model.added.append(id)
            model.queue(
                id,
                host: hosts[Int.random(in: 0..<hosts.count, using: &random)],
                priority: Int.random(in: -1...1, using: &random)
            )
        case 2, 3:
            // A running task ends: completed or failed.
            guard let id = model.scheduler.runningIDs.randomElement(using: &random) else { return }
            model.scheduler.remove(id)
            try model.machines[id]?.handle(Bool.random(using: &random) ? .complete : .fail)
        case 4:
            guard let id = pick, let state = model.machines[id]?.state,
                TaskStateMachine.next(from: state, on: .pause) != nil
            else { return }
            model.scheduler.remove(id)
            try model.machines[id]?.handle(.pause)
        case 5:
            guard let id = pick, let state = model.machines[id]?.state,
                TaskStateMachine.next(from: state, on: .resume) != nil, let entry = model.entries[id]
            else { return }
            try model.machines[id]?.handle(.resume)
            model.queue(id, host: entry.host, priority: entry.priority)
        case 6:
            try model.yield(model.scheduler.setMaxConcurrent(Int.random(in: 1...6, using: &random)))
            for id in model.scheduler.waitingIDs where model.machines[id]?.state != .queued {
                Issue.record("a task sent back to waiting is \(model.machines[id]?.state.rawValue ?? "unknown")")
            }
        case 7:
            try model.yield(model.scheduler.setPerHostLimit(Int.random(in: 1...3, using: &random)))
        default:
            break  // The manager admits after every event.
        }
        try model.admitAndStart()
    }

    /// The invariants, checked after every event; what is broken, in words.
    static func broken(_ model: Model) -> [String] {
        var broken: [String] = []
        let scheduler = model.scheduler
        let running = scheduler.runningIDs
        let waiting = scheduler.waitingIDs
        if running.count > scheduler.maxConcurrent {
            broken.append("\(running.count) running over the limit of \(scheduler.maxConcurrent)")
        }
        let perHost = Dictionary(grouping: running) { model.entries[$0]?.host ?? "" }
        for (host, ids) in perHost where ids.count > scheduler.perHostLimit {
            broken.append("\(ids.count) running on \(host) over its cap of \(scheduler.perHostLimit)")
        }
        if !Set(running).isDisjoint(with: waiting) || Set(running).count != running.count
            || Set(waiting).count != waiting.count
        {
            broken.append("a task in two places")
        }
        let (runningSet, waitingSet) = (Set(running), Set(waiting))
        for (id, machine) in model.machines {
            let placed = runningSet.contains(id) ? TaskState.running : waitingSet.contains(id) ? .queued : nil
            switch machine.state {
            case .running, .queued:
                if placed != machine.state {
                    broken.append("a \(machine.state) task placed as \(placed.map(\.rawValue) ?? "nowhere")")
                }
            default:
                if placed != nil { broken.append("a \(machine.state) task still in the scheduler") }
            }
        }
        let line = waiting.compactMap { model.entries[$0] }
        for (a, b) in zip(line, line.dropFirst())
        where a.priority < b.priority || (a.priority == b.priority && a.queueOrder > b.queueOrder) {
            broken.append("the waiting line is out of order")
        }
        // No task waits that could start now.
        if running.count < scheduler.maxConcurrent,
            line.contains(where: { (perHost[$0.host]?.count ?? 0) < scheduler.perHostLimit })
        {
            broken.append("a task waits though the limits leave it room")
        }
        if model.startedFrom.contains(where: { $0 != .queued }) {
            broken.append("a task started from another state than queued")
        }
        return broken
    }

    @Test(
        "the checks see a broken model: a task running outside the scheduler, a line out of order, a task left waiting"
    )
    func checksCanFail() throws {
        var model = Model(maxConcurrent: 2, perHost: 2)
        let stray = UUID()
        model.machines[stray] = TaskStateMachine(.running)
        #expect(Self.broken(model).contains("a running task placed as nowhere"))

        var idle = Model(maxConcurrent: 2, perHost: 2)
        let (first, second) = (UUID(), UUID())
        idle.machines[first] = TaskStateMachine(.queued)
        idle.machines[second] = TaskStateMachine(.queued)
        idle.queue(first, host: "a:80", priority: 0)
        idle.queue(second, host: "a:80", priority: 0)
        #expect(Self.broken(idle) == ["a task waits though the limits leave it room"])
        idle.entries[first]?.queueOrder = 99  // The line as the scheduler holds it, now out of order.
        #expect(Self.broken(idle).contains("the waiting line is out of order"))
    }

    @Test("200 sequences of 400 random events: every invariant holds after every event", arguments: 0..<4)
    func randomSequences(batch: Int) throws {
        for sequence in 0..<50 {
            let seed = UInt64(batch * 50 + sequence)
            var random = SeededGenerator(state: seed)
            var model = Model(maxConcurrent: Int.random(in: 1...5, using: &random), perHost: 2)
            for event in 0..<400 {
                try Self.step(&model, &random)
                let broken = Self.broken(model)
                guard broken.isEmpty else {
                    Issue.record("seed \(seed), event \(event): \(broken.joined(separator: "; "))")
                    return
                }
            }
        }
    }
}
