import Synchronization

/// Runs an action once the asks for it have stopped for a quiet spell: many asks in a row
/// (a list added in a thousand batches) make one run, after the last of them. An ask whose
/// spell ends while a run is under way is that run.
package final class QuietSpell: Sendable {
    private let clock: any Clock<Duration>
    private let quiet: Duration
    private let action: @Sendable () async -> Void
    /// How many times the action was asked for: a spell that ends with a later ask made is not
    /// the last, and runs nothing.
    private let asked = Atomic<UInt64>(0)
    private let running = Atomic<Bool>(false)

    package init(
        quiet: Duration,
        clock: any Clock<Duration> = ContinuousClock(),
        action: @escaping @Sendable () async -> Void
    ) {
        self.quiet = quiet
        self.clock = clock
        self.action = action
    }

    /// Asks for the action: it runs `quiet` after this ask unless another comes first. The
    /// task returned ends when this ask's spell has ended (and its run, if it made one).
    @discardableResult
    package func ask() -> Task<Void, Never> {
        let ask = asked.add(1, ordering: .acquiringAndReleasing).newValue
        return Task.detached(priority: .background) { [self] in
            do { try await clock.sleep(for: quiet) } catch { return }
            guard asked.load(ordering: .acquiring) == ask,
                !running.exchange(true, ordering: .acquiringAndReleasing)
            else { return }
            await action()
            running.store(false, ordering: .releasing)
        }
    }
}
