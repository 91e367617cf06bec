import Foundation
import HaulTestSupport
import Testing

@testable import Haul

/// The planner of a transfer's loop (``NextStep``), as a value: what each way an attempt
/// ends leads to, when a source is asked to give way, and the budgets it counts against.
@Suite("Next step after an attempt", .timeLimit(.minutes(1)))
struct NextStepTests {
    static let url = URL(string: "http://h.test/f")!
    static let policy = RetryPolicy(maxRetries: 2, baseDelay: .seconds(1), maxDelay: .seconds(8))
    static let reset = HaulError(.connection, "The connection was reset", url: url)

    /// The planner's answer in words, with the lead questions it asked.
    final class Run {
        var budget = RetryBudget(maxRetries: 2, maxRestarts: 3, committed: 100)
        var facts = NextStep.Facts(
            url: NextStepTests.url,
            committed: 100,
            verifiedSources: 0,
            offline: { false },
            rules: TransferRules(Validators())
        )
        var leadGivesWay = false
        var changedLeadGivesWay = false
        var asked: [String] = []

        func next(_ outcome: AttemptOutcome) -> String {
            let step = NextStep.after(
                outcome,
                facts: facts,
                budget: &budget,
                policy: NextStepTests.policy,
                leadGivesWay: { _, retryable in
                    self.asked.append("lead, retryable: \(retryable)")
                    return self.leadGivesWay
                },
                changedLeadGivesWay: { reason in
                    self.asked.append("changed lead: \(reason)")
                    return self.changedLeadGivesWay
                },
                random: 1
            )
            return switch step {
            case .finish: "finish"
            case .stop: "stop"
            case .giveUp(let error): "give up: \((error as? HaulError).map { "\($0.code)" } ?? "\(type(of: error))")"
            case .nextSource: "next source"
            case let .startOver(_, declined): declined ? "write whole" : "start over"
            case let .retry(_, delay, attempt): "retry \(attempt) after \(delay)"
            }
        }
    }

    @Test("an attempt done, a connection stepping aside and a stop end the loop, asking no source and not the route")
    func ends() {
        let run = Run()
        // Each look at the route is a socket and an interface listing: never after a success.
        run.facts.offline = {
            Issue.record("the route was looked at for an attempt that did not fail")
            return false
        }
        #expect(run.next(.done) == "finish")
        #expect(run.next(.stepAside) == "finish")
        #expect(run.next(.stopped) == "stop")
        #expect(run.asked.isEmpty)
    }

    @Test("a final failure tries the next source when the lead gives way, else gives up with that failure")
    func finalFailure() {
        let run = Run()
        let notFound = HaulError(.httpStatus, "HTTP 404", url: Self.url)
        #expect(run.next(.failed(notFound)) == "give up: httpStatus")
        run.leadGivesWay = true
        #expect(run.next(.failed(notFound)) == "next source")
        #expect(run.asked == ["lead, retryable: false", "lead, retryable: false"])
    }

    @Test(
        "a retryable failure: offline it is the manager's to wait, a lead giving way costs no retry, else back off and give up"
    )
    func retries() {
        let run = Run()
        run.facts.offline = { true }
        #expect(run.next(.retry(Self.reset)) == "give up: connection")
        #expect(run.asked.isEmpty)
        run.facts.offline = { false }
        run.leadGivesWay = true
        #expect(run.next(.retry(Self.reset)) == "next source")
        run.leadGivesWay = false
        #expect(run.next(.retry(Self.reset)) == "retry 1 after 1.0 seconds")
        #expect(run.next(.retry(Self.reset)) == "retry 2 after 2.0 seconds")
        #expect(run.next(.retry(Self.reset)) == "give up: connection")
        #expect(run.asked == Array(repeating: "lead, retryable: true", count: 4))
    }

    @Test("a changed file starts over at most three times; with verified mirrors holding the bytes, they continue it")
    func changedFile() {
        let run = Run()
        let changed = Restart(reason: "the ETag changed")
        #expect((0..<3).map { _ in run.next(.restart(changed)) } == Array(repeating: "start over", count: 3))
        #expect(run.next(.restart(changed)) == "give up: representationChanged")
        #expect(run.asked.isEmpty)

        let mirrored = Run()
        mirrored.facts.verifiedSources = 2
        #expect(mirrored.next(.restart(changed)) == "give up: Restart")
        mirrored.changedLeadGivesWay = true
        #expect(mirrored.next(.restart(changed)) == "next source")
        #expect(mirrored.asked == ["changed lead: the ETag changed", "changed lead: the ETag changed"])
        // Nothing written yet: nothing for the mirrors to continue, so the file starts over.
        mirrored.facts.committed = 0
        #expect(mirrored.next(.restart(changed)) == "start over")
    }
}
