import Testing

/// Chromium watches this network namespace's links and addresses, and aborts what it is
/// loading when they change (`net::ERR_NETWORK_CHANGED`, logged in the page's console). The
/// tests that create, take down and remove veth pairs change them; the browser's tests need
/// them still. So the two never overlap: a ``VethPair`` holds a change from its creation to
/// its removal (several may at once), and a suite with `.quietNetwork` waits until none is
/// held and holds new ones back until it ends (waiting suites go first, so none starves).
package actor NetworkChanges {
    package static let shared = NetworkChanges()

    private var changes = 0
    private var quiet = false
    private var quietWaiting = 0
    private var waiters: [CheckedContinuation<Void, Never>] = []

    /// A change of links begins, once no quiet period is on or waiting.
    package func beginChange() async {
        while quiet || quietWaiting > 0 { await nextChange() }
        changes += 1
    }

    /// A change of links is over (the pair removed).
    package func endChange() {
        changes = max(0, changes - 1)
        wakeAll()
    }

    /// A quiet period begins, once no change is under way and no other quiet period is on.
    package func beginQuiet() async {
        quietWaiting += 1
        while quiet || changes > 0 { await nextChange() }
        quietWaiting -= 1
        quiet = true
    }

    package func endQuiet() {
        quiet = false
        wakeAll()
    }

    /// Returns when the changes or the quiet periods change next (no timer: a signal).
    private func nextChange() async {
        await withCheckedContinuation { waiters.append($0) }
    }

    /// Every waiter checks again what it waits for.
    private func wakeAll() {
        let woken = waiters
        waiters = []
        for waiter in woken { waiter.resume() }
    }
}

/// No link of this namespace changes while the suite runs (``NetworkChanges``).
package struct QuietNetworkScope: SuiteTrait, TestScoping {
    package func provideScope(
        for test: Test,
        testCase: Test.Case?,
        performing function: @Sendable () async throws -> Void
    ) async throws {
        await NetworkChanges.shared.beginQuiet()
        do {
            try await function()
        } catch {
            await NetworkChanges.shared.endQuiet()
            throw error
        }
        await NetworkChanges.shared.endQuiet()
    }
}

extension Trait where Self == QuietNetworkScope {
    /// No veth pair is created, changed or removed while the suite runs: for a browser,
    /// which aborts its loads when links change.
    package static var quietNetwork: Self { Self() }
}
