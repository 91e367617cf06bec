import Foundation

/// A ``ManagerMachine``'s slots, one per task it knows, as a dictionary by id. Most slots
/// hold only a state and how the scheduler sees the task — every task of a long queue that
/// just waits — and are kept in 16 bytes, the host by number; a slot with more to say (what
/// the store owes it, a retry streak, news of a claim) is kept whole. The tasks the store
/// owes something are indexed too, so finding them looks at them alone.
struct TaskSlots: Sendable {
    /// A slot that is a state and an entry, nothing else: 16 bytes.
    private struct Compact: Sendable {
        static let hasEntry: UInt8 = 1
        static let allowsMetered: UInt8 = 2

        var queueOrder: Int64
        var host: UInt32
        var priority: Int16
        var state: TaskState
        var flags: UInt8
    }

    private var compact: [UUID: Compact] = [:]
    private var whole: [UUID: TaskSlot] = [:]
    private var hosts = HostNames()
    /// The tasks whose state the store may not hold, or that are held for it.
    private(set) var owing: Set<UUID> = []

    subscript(id: UUID) -> TaskSlot? {
        get {
            guard let slot = compact[id] else { return whole[id] }
            guard slot.flags & Compact.hasEntry != 0 else { return TaskSlot(slot.state) }
            let entry = Scheduler.Entry(
                id: id,
                host: hosts.name(slot.host),
                priority: Int(slot.priority),
                queueOrder: slot.queueOrder,
                allowsMetered: slot.flags & Compact.allowsMetered != 0
            )
            return TaskSlot(slot.state, entry: entry)
        }
        set {
            guard let newValue else {
                compact[id] = nil
                whole[id] = nil
                owing.remove(id)
                return
            }
            if let slot = compacted(newValue) {
                compact[id] = slot
                whole[id] = nil
            } else {
                whole[id] = newValue
                compact[id] = nil
            }
            if newValue.unrecorded != nil || newValue.heldForStore {
                owing.insert(id)
            } else if !owing.isEmpty {
                owing.remove(id)
            }
        }
    }

    var count: Int { compact.count + whole.count }
    var ids: [UUID] { Array(compact.keys) + Array(whole.keys) }

    /// `slot` kept small, if nothing in it but its state and entry (a priority a store
    /// could hold beyond 16 bits — the API's are -1,000 to 1,000 — is kept whole, as it is).
    private mutating func compacted(_ slot: TaskSlot) -> Compact? {
        guard slot == TaskSlot(slot.state, entry: slot.entry) else { return nil }
        guard let entry = slot.entry else {
            return Compact(queueOrder: 0, host: 0, priority: 0, state: slot.state, flags: 0)
        }
        guard let priority = Int16(exactly: entry.priority) else { return nil }
        return Compact(
            queueOrder: entry.queueOrder,
            host: hosts.number(entry.host),
            priority: priority,
            state: slot.state,
            flags: Compact.hasEntry | (entry.allowsMetered ? Compact.allowsMetered : 0)
        )
    }
}
