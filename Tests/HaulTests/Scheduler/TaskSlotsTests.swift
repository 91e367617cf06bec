import Foundation
import Testing

@testable import Haul

/// The manager's slots keep what they are given, whichever way each is kept.
@Suite("Task slots: small and whole")
struct TaskSlotsTests {
    static func entry(_ host: String, priority: Int = 0, order: Int64 = 1, metered: Bool = true) -> Scheduler.Entry {
        var entry = Scheduler.Entry(id: UUID(), host: host, priority: priority, queueOrder: order)
        entry.allowsMetered = metered
        return entry
    }

    @Test("every kind of slot reads back as written; removed, it is gone; owing follows the store's debts")
    func readBack() {
        var slots = TaskSlots()
        var expected: [UUID: TaskSlot] = [:]
        let plain = Self.entry("a:80", priority: -1_000, order: 7, metered: false)
        let wide = Self.entry("b:443", priority: Int.max, order: .max)
        var owed = TaskSlot(.failed, entry: Self.entry("a:80"))
        owed.unrecorded = .some("The disk is full")
        var held = TaskSlot(.queued, entry: Self.entry("c:80"))
        held.heldForStore = true
        var streak = TaskSlot(.retrying, entry: Self.entry("a:80"))
        streak.retryAttempts = 3
        var elsewhere = TaskSlot(.running, entry: Self.entry("d:8080"))
        elsewhere.stateElsewhere = .some(nil)
        for slot in [
            TaskSlot(.queued, entry: plain), TaskSlot(.completed), TaskSlot(.paused, entry: wide), owed, held, streak,
            elsewhere,
        ] {
            let id = slot.entry?.id ?? UUID()
            slots[id] = slot
            expected[id] = slot
        }
        #expect(slots.count == expected.count)
        #expect(Set(slots.ids) == Set(expected.keys))
        for (id, slot) in expected { #expect(slots[id] == slot) }
        #expect(slots.owing == [owed.entry!.id, held.entry!.id])

        // A slot's debt paid: it is small again, and owes nothing.
        slots[owed.entry!.id]?.unrecorded = nil
        #expect(slots[owed.entry!.id] == TaskSlot(.failed, entry: owed.entry))
        #expect(slots.owing == [held.entry!.id])
        // One slot changed in place keeps the others as they were.
        slots[plain.id]?.machine = TaskStateMachine(.paused)
        #expect(slots[plain.id] == TaskSlot(.paused, entry: plain))
        #expect(slots[wide.id] == TaskSlot(.paused, entry: wide))
        slots[held.entry!.id] = nil
        #expect(slots[held.entry!.id] == nil)
        #expect(slots.owing.isEmpty)
        #expect(slots.count == expected.count - 1)
    }
}
