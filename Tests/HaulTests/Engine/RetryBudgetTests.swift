import HaulTestSupport
import Testing

@testable import Haul

/// The tries one run may spend, as a pure value: when a streak of failures starts over,
/// when it runs out, and how many restarts from 0 a run gets.
@Suite("Retry budget", .timeLimit(.minutes(1)))
struct RetryBudgetTests {
    /// The attempts `budget` answers for failures at `points` (committed bytes, and whether
    /// they count as progress), in order.
    static func attempts(_ budget: inout RetryBudget, _ points: [(Int64, Bool)]) -> [Int?] {
        points.map { budget.failed(committed: $0.0, countsAsProgress: $0.1) }
    }

    @Test("failures without progress run out after maxRetries; the attempts count 1, 2, 3")
    func runsOut() {
        var budget = RetryBudget(maxRetries: 3, maxRestarts: 3, committed: 100)
        let answers = Self.attempts(&budget, [(100, true), (100, true), (100, true), (100, true)])
        #expect(answers == [1, 2, 3, nil])
    }

    @Test("reaching further than ever starts the streak over; coming back to a point reached before does not")
    func progressStartsOver() {
        var budget = RetryBudget(maxRetries: 2, maxRestarts: 3, committed: 0)
        // A server that breaks off every whole response at the same point writes bytes each
        // time (5 after 20), never further than before.
        let answers = Self.attempts(&budget, [(10, true), (10, true), (20, true), (5, true), (20, true)])
        #expect(answers == [1, 2, 1, 2, nil])
        #expect(budget.furthest == 20)
    }

    @Test("bytes below the speed floor are no progress: the streak goes on, and the furthest point still moves")
    func trickleIsNoProgress() {
        var budget = RetryBudget(maxRetries: 2, maxRestarts: 3, committed: 0)
        #expect(Self.attempts(&budget, [(10, false), (30, false), (40, false)]) == [1, 2, nil])
        #expect(budget.furthest == 40)
        // Real progress after a trickle starts over.
        var other = RetryBudget(maxRetries: 2, maxRestarts: 3, committed: 0)
        #expect(Self.attempts(&other, [(10, false), (20, false), (50, true)]) == [1, 2, 1])
    }

    @Test("restarts from 0: maxRestarts of them, then no more")
    func restarts() {
        var budget = RetryBudget(maxRetries: 5, maxRestarts: 2, committed: 0)
        let answers = (0..<3).map { _ in budget.restarted() }
        #expect(answers == [true, true, false])
        #expect(budget.restarts == 3)
    }
}
