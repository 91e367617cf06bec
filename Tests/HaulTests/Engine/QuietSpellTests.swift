import HaulTesting
import Synchronization
import Testing

@testable import Haul

/// The daemon's memory trim runs once asking has stopped for a spell (``QuietSpell``): checked
/// on a test clock, so the spell is exact and nothing waits real time.
@Suite("An action run once asking stops", .timeLimit(.minutes(1)))
struct QuietSpellTests {
    /// Counts runs, and tells when one starts; with `holdingFirst`, the first run waits until the
    /// test lets it finish (later ones do not, so a run that should not have started shows).
    final class Runs: Sendable {
        private let runs = Atomic(0)
        private let holdingFirst: Bool
        private let release = AsyncStream<Void>.makeStream()
        private let started = AsyncStream<Void>.makeStream()

        init(holdingFirst: Bool = false) { self.holdingFirst = holdingFirst }
        var count: Int { runs.load(ordering: .sequentiallyConsistent) }

        /// The action.
        func run() async {
            let number = runs.add(1, ordering: .sequentiallyConsistent).newValue
            started.continuation.yield()
            if holdingFirst, number == 1 { for await _ in release.stream { break } }
        }

        /// Returns once a run has started.
        func waitForStart() async { for await _ in started.stream { break } }
        func finish() { release.continuation.yield() }
    }

    @Test("three asks within the spell make one run, the spell after the last; not a moment before")
    func asksInARowRunOnce() async {
        let clock = TestClock()
        let runs = Runs()
        let spell = QuietSpell(quiet: .milliseconds(500), clock: clock) { await runs.run() }
        let first = spell.ask()
        await clock.waitForSleepers(1)
        clock.advance(by: .milliseconds(300))
        let second = spell.ask()
        let third = spell.ask()
        await clock.waitForSleepers(3)
        // The first ask's spell ends here, but later asks were made: nothing runs.
        clock.advance(by: .milliseconds(200))
        await first.value
        #expect(runs.count == 0)
        // The last asks' spell: 500 ms after them, not 499.
        clock.advance(by: .milliseconds(299))
        #expect(clock.sleepers == 2)
        clock.advance(by: .milliseconds(1))
        await second.value
        await third.value
        #expect(runs.count == 1)
    }

    @Test("an ask after a run has ended makes another run")
    func askAfterARunRunsAgain() async {
        let clock = TestClock()
        let runs = Runs()
        let spell = QuietSpell(quiet: .milliseconds(500), clock: clock) { await runs.run() }
        for expected in 1...2 {
            let ask = spell.ask()
            await clock.waitForSleepers(1)
            clock.advance(by: .milliseconds(500))
            await ask.value
            #expect(runs.count == expected)
        }
    }

    @Test("an ask whose spell ends while a run is under way is that run")
    func askDuringARunJoinsIt() async {
        let clock = TestClock()
        let runs = Runs(holdingFirst: true)
        let spell = QuietSpell(quiet: .milliseconds(500), clock: clock) { await runs.run() }
        let first = spell.ask()
        await clock.waitForSleepers(1)
        clock.advance(by: .milliseconds(500))
        await runs.waitForStart()
        // The run is held; a new ask's spell ends meanwhile and starts nothing.
        let second = spell.ask()
        await clock.waitForSleepers(1)
        clock.advance(by: .milliseconds(500))
        await second.value
        #expect(runs.count == 1)
        runs.finish()
        await first.value
        #expect(runs.count == 1)
    }
}
