import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// Long random sequences of what happens to tasks — added, admitted, runs ending every way
/// they can, paused and cancelled (running or not, the store taking the stop or refusing
/// it), resumed, retried, waiting for the network, limits lowered and raised, the store
/// refusing and catching up, removed — driven through the ``ManagerMachine`` itself, as the
/// manager drives it, with the transfers it starts and stops modelled beside it. After every
/// event the invariants hold: the limits, one place per task that matches its state, a line
/// in start order, no waiting task that could start, starts only from queued and never of a
/// task whose transfer still runs, stops only of running transfers, and counts that equal the
/// states they summarise. Seeded, so a failure names the sequence that shows it.
@Suite("Manager machine invariants under random events", .timeLimit(.minutes(2)))
struct ManagerMachineTests {
    /// The machine, and the transfers it started as the manager runs them.
    struct Model {
        var machine: ManagerMachine
        /// Transfers running, with the stop asked of each (the first asked wins, as in
        /// ``TransferControl``).
        var transfers: [UUID: StopReason?] = [:]
        /// The tasks in the order they were added (a seed then picks the same ones).
        var added: [UUID] = []
        var hosts: [UUID: String] = [:]
        var nextOrder: Int64 = 0
        /// What went wrong while performing actions.
        var faults: [String] = []

        init(maxConcurrent: Int, perHost: Int) {
            machine = ManagerMachine(maxConcurrent: maxConcurrent, perHostLimit: perHost)
        }

        /// Adds a task on `host` as the manager does a new download.
        @discardableResult
        mutating func add(host: String, priority: Int = 0, paused: Bool = false) -> UUID {
            let id = UUID()
            added.append(id)
            hosts[id] = host
            let entry = Scheduler.Entry(id: id, host: host, priority: priority, queueOrder: order())
            _ = machine.added(entry, paused: paused)
            return id
        }

        mutating func order() -> Int64 {
            nextOrder += 1
            return nextOrder
        }

        /// Performs `actions` as the manager does, noting any that breaks a rule.
        mutating func perform(_ actions: [ManagerAction]) {
            var lastMove: (UUID, TaskState, TaskState)?
            for action in actions {
                switch action {
                case .start(let id):
                    if transfers[id] != nil { faults.append("a task started while its transfer runs") }
                    if let (moved, from, to) = lastMove, moved != id || from != .queued || to != .running {
                        faults.append("a start not from queued")
                    }
                    transfers[id] = .some(nil)
                case .stop(let id, let reason):
                    guard let asked = transfers[id] else {
                        faults.append("a stop of a task with no transfer")
                        continue
                    }
                    if asked == nil { transfers[id] = reason }
                case .publish(let id, let from, let to, _):
                    lastMove = (id, from, to)
                case .end: break
                case .illegal(let id, let error):
                    faults.append("illegal move of \(id): \(error)")
                }
            }
        }

        mutating func admit() {
            perform(machine.admit())
        }

        /// A running transfer ends, as its stop (if any) or its luck says.
        mutating func end(_ id: UUID, _ random: inout SeededGenerator) {
            guard let asked = transfers.removeValue(forKey: id) else { return }
            let end: RunEnd
            switch (asked, Int.random(in: 0..<8, using: &random)) {
            case (_, 0): end = .completed
            case (_, 1): end = .failed
            case (_, 2): end = .storeRefused("The disk is full", sharing: false)
            case (.pause, _), (.yield, _): end = .paused
            case (.cancel, _): end = .cancelled
            case (nil, 3):
                perform(machine.retryingLater(id, attempt: 1))
                return
            case (nil, 4):
                perform(machine.leftRun(id, .offline, reason: .noRoute))
                return
            case (nil, _): end = .completed
            }
            perform(machine.runEnded(id, end, stop: asked))
        }

        /// A pause or cancel of a task that is not running, its record taken or refused.
        mutating func stopWaiting(_ id: UUID, _ event: TaskStateMachine.Event, recorded: Bool) {
            guard let state = machine.state(of: id) else { return }
            let origin = machine.stopBegins(id)
            machine.stopEnds(id, recorded: recorded, was: state, from: origin)
            if recorded { perform(machine.move(id, event)) }
        }
    }

    static let hosts = ["a:80", "b:80", "c:443"]

    /// Applies one random event to `model`.
    static func step(_ model: inout Model, _ random: inout SeededGenerator) {
        let pick = model.added.isEmpty ? nil : model.added[Int.random(in: 0..<model.added.count, using: &random)]
        let state = pick.flatMap { model.machine.state(of: $0) }
        switch Int.random(in: 0..<12, using: &random) {
        case 0, 1:
            model.add(
                host: hosts[Int.random(in: 0..<hosts.count, using: &random)],
                priority: Int.random(in: -1...1, using: &random),
                paused: Int.random(in: 0..<10, using: &random) == 0
            )
        case 2, 3:
            guard
                let id = model.transfers.keys.sorted(by: { $0.uuidString < $1.uuidString }).randomElement(
                    using: &random
                )
            else { return }
            model.end(id, &random)
        case 4, 5:
            guard let id = pick, let state else { return }
            let event: TaskStateMachine.Event = Bool.random(using: &random) ? .pause : .cancel
            if state == .running {
                model.perform([.stop(id, event == .pause ? .pause : .cancel)])
            } else if TaskStateMachine.next(from: state, on: event) != nil {
                model.stopWaiting(id, event, recorded: Int.random(in: 0..<5, using: &random) > 0)
            }
        case 6:
            guard let id = pick, let state, TaskStateMachine.next(from: state, on: .resume) != nil else { return }
            let priority: Int? = Bool.random(using: &random) ? nil : 1
            model.perform(model.machine.resumed(id, order: model.order(), priority: priority))
        case 7:
            model.perform(model.machine.setMaxConcurrent(Int.random(in: 1...6, using: &random)))
        case 8:
            model.perform(model.machine.setPerHostLimit(Int.random(in: 1...3, using: &random)))
        case 9:
            guard let id = pick else { return }
            model.perform(model.machine.retryDue(id))
            model.perform(model.machine.online(id))
        case 10:
            // The store takes writes again: what it owed is written, the held tasks line up.
            for (id, state, message) in model.machine.unrecordedStates {
                model.machine.recorded(id, state, message: message)
            }
            model.machine.requeueHeld()
        default:
            guard let id = pick, let state, state != .running else { return }
            model.machine.forget(id)
        }
        model.admit()
    }

    /// The invariants, checked after every event; what is broken, in words.
    static func broken(_ model: Model) -> [String] {
        var broken = model.faults
        let machine = model.machine
        let running = machine.runningIDs
        let waiting = machine.waitingIDs
        if running.count > machine.maxConcurrent {
            broken.append("\(running.count) running over the limit of \(machine.maxConcurrent)")
        }
        let perHost = Dictionary(grouping: running) { model.hosts[$0] ?? "" }
        for (host, ids) in perHost where ids.count > machine.perHostLimit {
            broken.append("\(ids.count) running on \(host) over its cap of \(machine.perHostLimit)")
        }
        if !Set(running).isDisjoint(with: waiting) || Set(running).count != running.count
            || Set(waiting).count != waiting.count
        {
            broken.append("a task in two places")
        }
        if machine.running != Set(model.transfers.keys) {
            broken.append("the machine's running transfers are not the ones running")
        }
        // A transfer asked to stop may have been sent back to the line too (a limit lowered
        // while it paused); one going on is among the scheduler's running, within its limits.
        for (id, asked) in model.transfers where asked == nil && !running.contains(id) {
            broken.append("a transfer runs outside the scheduler's running tasks")
        }
        for id in model.added {
            broken += misplaced(id, in: model)
        }
        let line = waiting.compactMap { id in machine[id]?.entry }
        for (a, b) in zip(line, line.dropFirst())
        where a.priority < b.priority || (a.priority == b.priority && a.queueOrder > b.queueOrder) {
            broken.append("the waiting line is out of order")
        }
        // No task waits that could start now.
        if !machine.storeRefusing, running.count < machine.maxConcurrent,
            line.contains(where: { (perHost[$0.host]?.count ?? 0) < machine.perHostLimit })
        {
            broken.append("a task waits though the limits leave it room")
        }
        let states = model.added.compactMap { machine.state(of: $0) }
        let snapshot = machine.snapshot
        if snapshot.running.count != states.filter({ $0 == .running }).count {
            broken.append(
                "\(snapshot.running.count) counted running, \(states.filter { $0 == .running }.count) in that state"
            )
        }
        if snapshot.waiting != waiting.filter({ machine.state(of: $0) == .queued }).count {
            broken.append("the waiting count is not the queued tasks in line")
        }
        return broken
    }

    /// Where task `id` is against its state: running only with a transfer; queued in line
    /// (or held for the store); in no line in any other state.
    static func misplaced(_ id: UUID, in model: Model) -> [String] {
        let machine = model.machine
        guard let slot = machine[id] else {
            return machine.isWaiting(id) || machine.runningIDs.contains(id) ? ["a forgotten task still in line"] : []
        }
        let inLine = machine.isWaiting(id) || machine.runningIDs.contains(id)
        switch slot.state {
        case .running:
            return model.transfers[id] == nil ? ["a running task with no transfer"] : []
        case .queued:
            if model.transfers[id] != nil { return ["a queued task whose transfer runs"] }
            return machine.isWaiting(id) || slot.heldForStore ? [] : ["a queued task out of line"]
        default:
            return inLine ? ["a \(slot.state.rawValue) task still in line"] : []
        }
    }

    @Test("the checks see what the machine and the transfers disagree on")
    func checksCanFail() {
        var model = Model(maxConcurrent: 2, perHost: 2)
        let id = model.add(host: "a:80")
        #expect(Self.broken(model) == ["a task waits though the limits leave it room"])
        model.admit()
        #expect(Self.broken(model).isEmpty)
        model.transfers[id] = nil  // A transfer the model lost.
        #expect(Self.broken(model).contains("a running task with no transfer"))
        model.transfers[id] = .some(nil)
        model.perform([.start(id)])
        #expect(Self.broken(model).contains("a task started while its transfer runs"))
    }

    @Test("a yielded run admitted again while it stops starts again once it has stopped")
    func yieldedRunStartsAgain() {
        var model = Model(maxConcurrent: 1, perHost: 1)
        model.add(host: "a:80")
        model.admit()
        let other = model.add(host: "b:80", priority: 5)
        model.perform(model.machine.setMaxConcurrent(2))
        model.admit()
        model.perform(model.machine.setMaxConcurrent(1))
        #expect(model.transfers[other] == .some(.yield))
        model.perform(model.machine.setMaxConcurrent(2))
        model.admit()  // Admitted again while still stopping: no second start.
        #expect(model.faults.isEmpty)
        let actions = model.machine.runEnded(other, .paused, stop: .yield)
        model.transfers[other] = nil
        model.perform(actions)
        #expect(actions.contains(.start(other)))
        #expect(model.machine.state(of: other) == .running)
        #expect(Self.broken(model) == [])
    }

    @Test("200 sequences of 400 random events: every invariant holds after every event", arguments: 0..<4)
    func randomSequences(batch: Int) async {
        // Seconds of CPU in a debug build: off the cooperative pool the other tests share.
        let broken = await offCooperativePool { Self.firstBroken(batch: batch) }
        #expect(broken == nil)
    }

    /// The first invariant broken in the batch's 50 sequences, with its seed and event.
    static func firstBroken(batch: Int) -> String? {
        for sequence in 0..<50 {
            let seed = UInt64(batch * 50 + sequence)
            var random = SeededGenerator(state: seed)
            var model = Model(maxConcurrent: Int.random(in: 1...5, using: &random), perHost: 2)
            for event in 0..<400 {
                Self.step(&model, &random)
                let broken = Self.broken(model)
                guard broken.isEmpty else { return "seed \(seed), event \(event): \(broken.joined(separator: "; "))" }
            }
        }
        return nil
    }
}
