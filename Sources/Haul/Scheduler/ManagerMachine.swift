import Foundation

/// Everything a ``DownloadManager`` knows of its tasks, in one value that takes events and
/// returns actions (the pattern of AsyncHTTPClient's `RequestBag.StateMachine`): no I/O, no
/// clock, no awaits. The actor feeds it what happened — a task added, a run ended, a pause
/// recorded, a limit changed, a claim revoked — and performs the actions it returns, in
/// order: start a transfer, ask one to stop, publish a change of state, announce an end.
///
/// Each task has one ``TaskSlot`` (kept in ``TaskSlots``, most in a few bytes): its state (moved
/// only by ``TaskStateMachine``), its place in the ``Scheduler``'s line, what the store owes it. Whether its transfer runs is the
/// ``running`` index, kept by ``admit(mayRun:)`` and the run's end alone. A running
/// transfer's handles and the timers of waiting tasks stay with the actor (the I/O).
///
/// See docs/architecture.md, "The manager's state", for the events and the diagram.
struct ManagerMachine: Sendable {
    /// How many runs in a row the store may fail for one task, while taking other writes,
    /// before the task fails (a store that refuses only its records is not waited for ever).
    static let storeFailureLimit = 5

    private(set) var slots = TaskSlots()
    private(set) var scheduler: Scheduler
    /// The tasks with a transfer running, from its start until its end is handled.
    private(set) var running: Set<UUID> = []
    /// The tasks whose stop (of one not running) is being recorded: a claim taken meanwhile
    /// does not start it.
    private(set) var stopping: Set<UUID> = []
    /// Nothing starts once the manager stops.
    var shuttingDown = false
    var storeRefusing = false  // The store refused the last write: nothing starts until one passes.
    /// Tasks run under a shared queue's claims: one that yields goes back to that queue.
    let sharesQueue: Bool

    init(maxConcurrent: Int, perHostLimit: Int, sharesQueue: Bool = false) {
        scheduler = Scheduler(maxConcurrent: maxConcurrent, perHostLimit: perHostLimit)
        self.sharesQueue = sharesQueue
    }

    // MARK: Looking

    subscript(id: UUID) -> TaskSlot? { slots[id] }
    func state(of id: UUID) -> TaskState? { slots[id]?.state }
    func isRunning(_ id: UUID) -> Bool { running.contains(id) }
    var knownIDs: [UUID] { slots.ids }
    var runningIDs: [UUID] { scheduler.runningIDs }  // Oldest start first.
    var waitingIDs: [UUID] { scheduler.waitingIDs }  // Next to start first.
    func isWaiting(_ id: UUID) -> Bool { scheduler.isWaiting(id) }
    var maxConcurrent: Int { scheduler.maxConcurrent }
    var perHostLimit: Int { scheduler.perHostLimit }

    /// What listings and counts show of the tasks, taken at once (ManagerSnapshot.swift).
    var snapshot: ManagerSnapshot { ManagerSnapshot(running: running, slots: slots, scheduler: scheduler) }

    /// Tasks the store may not hold as they are here, or held back for it.
    var owesStore: Bool { !slots.owing.isEmpty }

    /// The states the store still owes, with the error message of each.
    var unrecordedStates: [(id: UUID, state: TaskState, message: String?)] {
        slots.owing.compactMap { id in slots[id].flatMap { slot in slot.unrecorded.map { (id, slot.state, $0) } } }
    }

    // MARK: Moves

    /// Applies a state-machine event, with `reason` or the one the event gives.
    mutating func move(_ id: UUID, _ event: TaskStateMachine.Event, reason: StateChangeReason? = nil) -> [ManagerAction]
    {
        var machine = slots[id]?.machine ?? TaskStateMachine()
        let from = machine.state
        do {
            try machine.handle(event)
        } catch {
            return [.illegal(id, error)]
        }
        if slots[id] == nil { slots[id] = TaskSlot(machine.state) }
        slots[id]?.machine = machine
        return [.publish(id, from: from, to: machine.state, reason: reason ?? StateChangeReason(event))]
    }

    /// Starts what the scheduler admits, unless stopping or the store refuses writes.
    /// - Parameter mayRun: false for a waiting task that may not run here now (with a shared
    ///   queue, one this manager holds no claim on): it leaves the line. Nil (every task may
    ///   run) looks at none of the line but its head: this runs after every run's end, with
    ///   thousands waiting.
    mutating func admit(mayRun: ((UUID) -> Bool)? = nil) -> [ManagerAction] {
        guard !shuttingDown, !storeRefusing else { return [] }
        if let mayRun {
            for id in scheduler.waitingIDs where !mayRun(id) { scheduler.remove(id, hint: slots[id]?.entry) }
        }
        return scheduler.admit().filter { !running.contains($0) }.flatMap { start($0) }
    }

    private mutating func start(_ id: UUID) -> [ManagerAction] {
        guard !shuttingDown else { return [] }
        let moved = move(id, .start)
        running.insert(id)
        return moved + [.start(id)]
    }

    // MARK: Adding

    /// A task just recorded waits for its turn, or stays paused as recorded. Returns the
    /// state of one already known (another add found it meanwhile), changing nothing then.
    mutating func added(_ entry: Scheduler.Entry, paused: Bool) -> TaskState? {
        if let state = slots[entry.id]?.state { return state }
        slots[entry.id] = TaskSlot(paused ? .paused : .queued, entry: entry)
        if !paused { scheduler.enqueue(entry) }
        return nil
    }

    /// A task added again (finished, stopped, or not known) waits in line anew, keeping what
    /// the store owes it; false, changing nothing, when it is queued or running.
    mutating func addedAgain(_ entry: Scheduler.Entry) -> Bool {
        if let state = slots[entry.id]?.state, state == .queued || state == .running { return false }
        var slot = slots[entry.id] ?? TaskSlot(.queued)
        slot.machine = TaskStateMachine(.queued)
        slot.entry = entry
        slots[entry.id] = slot
        scheduler.enqueue(entry)
        return true
    }

    /// A task found in the store when the manager opened, in `state` once recovered (a run
    /// cut off by a crash queued again). A queued one takes its place in line, unless
    /// `inLine` is false (with a shared queue, one left running by another manager).
    mutating func recovered(_ id: UUID, _ state: TaskState, entry: Scheduler.Entry, inLine: Bool = true) {
        let finished = state == .completed || state == .cancelled
        slots[id] = TaskSlot(state, entry: finished ? nil : entry)
        if state == .queued, inLine { scheduler.enqueue(entry) }
    }

    // MARK: The user's operations

    /// A task not running leaves the line while its stop is recorded; returns where it was
    /// (``stopEnds(_:recorded:was:from:)``).
    mutating func stopBegins(_ id: UUID) -> StopOrigin {
        let inLine = scheduler.remove(id, hint: slots[id]?.entry)
        stopping.insert(id)
        let held = slots[id]?.heldForStore ?? false
        slots[id]?.heldForStore = false
        return StopOrigin(heldForStore: held, inLine: inLine)
    }

    /// The stop is recorded, or refused: a queued task then goes back where it was — held
    /// for the store, in line, or (with a shared queue, waiting there) neither.
    mutating func stopEnds(_ id: UUID, recorded: Bool, was previous: TaskState, from origin: StopOrigin) {
        stopping.remove(id)
        if recorded {
            slots[id]?.unrecorded = nil
        } else if previous == .queued {
            if origin.heldForStore {
                slots[id]?.heldForStore = true
            } else if origin.inLine, let entry = slots[id]?.entry {
                scheduler.enqueue(entry)
            }
        }
    }

    /// A paused, failed, retrying or waiting task is resumed at queue order `order`.
    mutating func resumed(_ id: UUID, order: Int64, priority: Int?) -> [ManagerAction] {
        slots[id]?.unrecorded = nil
        slots[id]?.storeFailures = 0
        slots[id]?.retryAttempts = 0
        let moved = move(id, .resume)
        var entry = slots[id]?.entry ?? Scheduler.Entry(id: id, host: "", priority: 0, queueOrder: order)
        entry.queueOrder = order
        if let priority { entry.priority = priority }
        slots[id]?.entry = entry
        scheduler.enqueue(entry)
        return moved
    }

    /// The task's entry changes (its place in the queue, its host); a waiting one moves in line.
    mutating func changeEntry(_ id: UUID, _ change: (inout Scheduler.Entry) -> Void) {
        guard var entry = slots[id]?.entry else { return }
        let old = entry
        change(&entry)
        slots[id]?.entry = entry
        if scheduler.isWaiting(id), scheduler.remove(id, hint: old) { scheduler.enqueue(entry) }
    }

    /// The task was removed: forgotten.
    mutating func forget(_ id: UUID) {
        scheduler.remove(id, hint: slots[id]?.entry)
        slots[id] = nil
    }

    /// Changes the overall limit: the tasks over it (most recently started first) stop.
    mutating func setMaxConcurrent(_ limit: Int) -> [ManagerAction] {
        scheduler.setMaxConcurrent(limit).map { .stop($0, .yield) }
    }
    /// Changes the per-host limit, like ``setMaxConcurrent(_:)``.
    mutating func setPerHostLimit(_ limit: Int) -> [ManagerAction] {
        scheduler.setPerHostLimit(limit).map { .stop($0, .yield) }
    }

    // MARK: A run's end

    /// A run ended: the task moves by how, and whoever waited may go on. One sent back to
    /// the line while it stopped, and admitted again meanwhile, starts again.
    mutating func runEnded(_ id: UUID, _ end: RunEnd, stop: StopReason?) -> [ManagerAction] {
        running.remove(id)
        slots[id]?.offlinePending = false
        var actions: [ManagerAction]
        switch end {
        case .completed:
            slots[id]?.storeFailures = 0
            slots[id]?.retryAttempts = 0
            scheduler.remove(id, hint: slots[id]?.entry)
            actions = move(id, .complete) + [.end(id)]
        case .revoked:
            actions = revoked(id)
        case .storeRefused(_, sharing: true) where stop != .pause && stop != .cancel:
            // The claim is left to run out; the task goes back to the shared queue.
            scheduler.remove(id, hint: slots[id]?.entry)
            actions = move(id, .yield, reason: .storeRefused)
        case .storeRefused(let message, sharing: _):
            actions = storeRefused(id, message, stop: stop)
        case .paused where stop == .yield:
            // The scheduler moved it back to waiting (stopping, it stays queued); with a
            // shared queue, it waits there (the state recorded ended its claim).
            if sharesQueue { scheduler.remove(id, hint: slots[id]?.entry) }
            actions = move(id, .yield)
        case .paused:
            scheduler.remove(id, hint: slots[id]?.entry)
            actions = move(id, .pause)
        case .cancelled:
            scheduler.remove(id, hint: slots[id]?.entry)
            actions = move(id, .cancel)
        case .failed:
            scheduler.remove(id, hint: slots[id]?.entry)
            actions = move(id, .fail) + [.end(id)]
        }
        if scheduler.isRunning(id), slots[id]?.state == .queued {
            actions += start(id)  // Admitted again while it was still stopping.
        }
        return actions
    }

    /// A run ended and the task now waits outside the line (`event`: to try again later, or
    /// for the network).
    mutating func leftRun(
        _ id: UUID,
        _ event: TaskStateMachine.Event,
        reason: StateChangeReason? = nil
    ) -> [ManagerAction] {
        running.remove(id)
        scheduler.remove(id, hint: slots[id]?.entry)
        slots[id]?.offlinePending = false
        return move(id, event, reason: reason)
    }

    /// A run ended because its claim was revoked: nothing more is written about the task
    /// here. Paused, cancelled, completed or failed elsewhere, it moves so here too (the
    /// session's log, which has that state already, does not tell it twice); taken over by
    /// another manager, it just stops running here, queued; removed, it is forgotten.
    private mutating func revoked(_ id: UUID) -> [ManagerAction] {
        scheduler.remove(id, hint: slots[id]?.entry)
        switch slots[id]?.stateElsewhere {
        case .some(.some(.paused)): return move(id, .pause, reason: .revoked)
        case .some(.some(.cancelled)): return move(id, .cancel, reason: .revoked)
        case .some(.some(.completed)): return move(id, .complete, reason: .revoked)
        case .some(.some(.failed)): return move(id, .fail, reason: .revoked)
        case .some(.none):
            slots[id] = nil
            return []
        default:
            // Taken over (or unknown): queued here, silently — its log tells the run elsewhere.
            guard let slot = slots[id] else { return [] }
            var next = TaskSlot(slot.state, entry: slot.entry)
            do {
                try next.machine.handle(.yield)
            } catch {
                return [.illegal(id, error)]
            }
            slots[id] = next
            return []
        }
    }

    /// A run ended because the store could not record it (a full disk, say): it moves to the
    /// state it was stopping for, or waits, held and queued, until the store takes writes;
    /// after ``storeFailureLimit`` such runs in a row it fails.
    private mutating func storeRefused(_ id: UUID, _ message: String, stop: StopReason?) -> [ManagerAction] {
        storeRefusing = true
        var actions: [ManagerAction]
        switch stop {
        case .pause:
            scheduler.remove(id, hint: slots[id]?.entry)
            actions = move(id, .pause)
        case .yield:
            actions = move(id, .yield)
        case .cancel:
            scheduler.remove(id, hint: slots[id]?.entry)
            actions = move(id, .cancel)
        case nil:
            let failures = (slots[id]?.storeFailures ?? 0) + 1
            slots[id]?.storeFailures = failures
            scheduler.remove(id, hint: slots[id]?.entry)
            guard failures < ManagerMachine.storeFailureLimit else {
                slots[id]?.storeFailures = 0
                actions = move(id, .fail)
                slots[id]?.unrecorded = .some(message)
                return actions + [.end(id)]
            }
            actions = move(id, .yield, reason: .storeRefused)
            slots[id]?.heldForStore = true
        }
        if slots[id]?.unrecorded == nil { slots[id]?.unrecorded = .some(nil) }
        return actions
    }

    // MARK: Waiting outside the line

    /// A run that failed in a way that may pass: its task waits for try `attempt`.
    mutating func retryingLater(_ id: UUID, attempt: Int) -> [ManagerAction] {
        slots[id]?.retryAttempts = attempt
        return leftRun(id, .retryLater)
    }

    /// The next try of a retrying task has come: it waits in line, in its old place.
    mutating func retryDue(_ id: UUID) -> [ManagerAction] {
        guard slots[id]?.state == .retrying else { return [] }  // Paused or cancelled meanwhile.
        return requeued(id, .retryDue)
    }

    /// A task waiting for the network has its route back: it waits in line, in its old place.
    mutating func online(_ id: UUID) -> [ManagerAction] {
        guard slots[id]?.state == .waitingForNetwork else { return [] }
        return requeued(id, .online)
    }

    /// A task waited for the network longer than allowed: it fails.
    mutating func gaveUp(_ id: UUID) -> [ManagerAction] {
        guard slots[id]?.state == .waitingForNetwork else { return [] }
        return move(id, .giveUp) + [.end(id)]
    }

    private mutating func requeued(_ id: UUID, _ event: TaskStateMachine.Event) -> [ManagerAction] {
        defer { if let entry = slots[id]?.entry { scheduler.enqueue(entry) } }
        return move(id, event)
    }

    /// The running task's route went: it stops, to wait for the network.
    mutating func routeGone(_ id: UUID) -> [ManagerAction] {
        guard running.contains(id) else { return [] }
        slots[id]?.offlinePending = true
        return [.stop(id, .yield)]
    }

    // MARK: The store's debts

    /// The store did not take the task's state (failed, with `message`).
    mutating func owe(_ id: UUID, message: String?) {
        slots[id]?.unrecorded = .some(message)
    }

    /// The store took `state` for the task: unless it changed meanwhile, nothing is owed.
    mutating func recorded(_ id: UUID, _ state: TaskState, message: String?) {
        storeRefusing = false
        if slots[id]?.state == state, slots[id]?.unrecorded == .some(message) { slots[id]?.unrecorded = nil }
    }

    /// After writing what the store owed: with nothing left to write it takes writes again,
    /// and the tasks held for it (and owed nothing) take their places in line.
    mutating func requeueHeld() {
        let owing = slots.owing.compactMap { id in slots[id].map { (id, $0) } }
        if !owing.contains(where: { $0.1.unrecorded != nil }) { storeRefusing = false }
        for (id, slot) in owing where slot.heldForStore && slot.unrecorded == nil {
            slots[id]?.heldForStore = false
            guard slot.state == .queued, let entry = slot.entry else { continue }
            scheduler.enqueue(entry)
        }
    }

    // MARK: A shared queue

    /// The shared queue gave this manager a claim on the task: it waits in line here.
    mutating func claimed(_ entry: Scheduler.Entry) {
        if slots[entry.id]?.state == .queued {
            slots[entry.id]?.entry = entry
        } else {
            // Known here in another state (changed elsewhere since), or not at all.
            slots[entry.id] = TaskSlot(.queued, entry: entry)
        }
        scheduler.enqueue(entry)
    }

    /// The shared store has the task in `state` (running elsewhere is waiting here); false if known so.
    mutating func changedElsewhere(_ entry: Scheduler.Entry, _ state: TaskState) -> Bool {
        let state = state == .running ? TaskState.queued : state
        guard slots[entry.id]?.state != state else { return false }
        slots[entry.id] = TaskSlot(state, entry: entry)
        return true
    }

    /// What the shared store said of a task whose claim was revoked (nil: removed there).
    mutating func noteStateElsewhere(_ id: UUID, _ state: TaskState??) {
        slots[id]?.stateElsewhere = state
    }
}
