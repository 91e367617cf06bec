import Foundation

/// How a manager keeps trying a download whose failure may pass — a refused connection, a
/// reset, a timeout, a 5xx, a 429 — after its transfer's own retries are spent, instead of
/// failing it: the task waits in ``TaskState/retrying`` (its data kept), tries again after a
/// capped exponential backoff, and fails only when it has been trying for ``giveUpAfter``
/// without moving forward. The daemon keeps trying; `haul get` does not.
public struct KeepTrying: Sendable, Equatable {
    /// How long a streak of tries without progress may last before the task fails.
    public var giveUpAfter: Duration
    /// The wait before the first try again; each further one doubles it.
    public var firstDelay: Duration
    /// The longest wait between tries.
    public var maxDelay: Duration

    public init(
        giveUpAfter: Duration = .seconds(24 * 3600),
        firstDelay: Duration = .seconds(30),
        maxDelay: Duration = .seconds(600)
    ) {
        self.giveUpAfter = giveUpAfter
        self.firstDelay = firstDelay
        self.maxDelay = maxDelay
    }

    /// The longest `giveUpAfter` taken: a year.
    public static let longestGiveUp: Duration = .seconds(366 * 86400)

    /// The wait before try number `attempt` (1-based): doubling from ``firstDelay`` up to
    /// ``maxDelay``, with jitter of up to a quarter less so many tasks do not retry in step.
    func delay(attempt: Int, random: Double = Double.random(in: 0...1)) -> Duration {
        let exponent = min(max(attempt - 1, 0), 30)
        let ceiling = min(maxDelay, firstDelay * (1 << exponent))
        return ceiling * (1 - 0.25 * random)
    }
}

extension DownloadManager {
    /// After a run that failed with `error`: when the manager keeps trying and the error may
    /// pass, moves the task to ``TaskState/retrying`` with its next try armed, and returns
    /// true; false leaves the failure to ``transferEnded(_:outcome:stop:mayHaveHooks:)``.
    /// - Parameter progressed: the run moved the download forward, which starts a new streak.
    func retryLater(_ id: UUID, after error: HaulError, progressed: Bool) async -> Bool {
        // With a shared queue, a part file another process holds is a manager whose claim on
        // this task was revoked and has yet to notice (stalled, say): it lets go once it
        // does, so try again.
        let passes = error.isRetryable || (sharedQueue != nil && error.code == .busy)
        guard let policy = keepTrying, passes, !shuttingDown, machine.isRunning(id),
            runs[id]?.handles.control.requested == nil
        else { return false }
        let now = timeline.date
        let stored = (try? await store.task(id: id)) ?? nil
        let (decision, since) = RetryDecision.keepTrying(
            after: error,
            policy: policy,
            now: now,
            streakSince: stored?.retryingSince,
            attempts: machine[id]?.retryAttempts ?? 0,
            progressed: progressed
        )
        guard case .retry(let delay, let attempt) = decision else {
            logger.notice("giving up", metadata: ["haul.task": "\(id)", "since": "\(since)"])
            return false
        }
        let nextTryAt = now.addingTimeInterval(delay.seconds)
        do {
            // Not "gave up": when it tries again is the task's state (retrying, and its next try).
            try await store.setRetrying(id, error: error.triesAgain.description, nextTryAt: nextTryAt, since: since)
        } catch {
            return false
        }
        // The store says retrying now: so does the manager. (A pause asked for meanwhile found
        // the transfer already ended; the task can be paused in its new state.)
        leaveRun(id) { $0.retryingLater(id, attempt: attempt) }
        logger.notice(
            "trying again later",
            metadata: ["haul.task": "\(id)", "in": "\(delay)", "error": "\(error.message)"]
        )
        armRetry(id, at: nextTryAt)
        admitAndStart()
        return true
    }

    /// Wakes the task at `date` to wait for a slot again.
    func armRetry(_ id: UUID, at date: Date) {
        timers[id]?.cancel()
        // At most a year: no date from the store makes the millisecond count overflow.
        let wait = min(max(0, date.timeIntervalSince(timeline.date)), 366 * 86400)
        let timeline = timeline
        timers[id] = Task { [weak self] in
            try? await timeline.sleep(for: .milliseconds(Int64(wait * 1000)))
            guard !Task.isCancelled else { return }
            await self?.retryDue(id)
        }
    }

    /// The next try of a retrying task has come: it queues in its old place.
    func retryDue(_ id: UUID) async {
        guard machine.state(of: id) == .retrying, !shuttingDown else { return }
        timers[id] = nil
        do {
            try await store.setState(id, .queued)
        } catch {
            // The store refuses for now: try again a little later.
            armRetry(id, at: timeline.date.addingTimeInterval(5))
            return
        }
        perform(machine.retryDue(id))  // Unless paused or cancelled meanwhile.
        admitAndStart()
    }

    /// Stops the wait of a task that no longer retries (paused, resumed, cancelled, removed).
    func disarmRetry(_ id: UUID) {
        timers[id]?.cancel()
        timers[id] = nil
    }

    /// How failures that may pass are tried again now; nil when they fail.
    public var keepsTrying: KeepTrying? { keepTrying }

    /// Changes how long tasks keep trying, at once (``KeepTrying/giveUpAfter``).
    /// - Throws: ``HaulError/Code/invalidArgument`` outside 1 second to a year, or for a
    ///   manager that does not keep trying.
    public func setGiveUpAfter(_ duration: Duration) throws {
        guard var policy = keepTrying else {
            throw HaulError(.invalidArgument, "This manager does not keep trying failed downloads")
        }
        guard duration >= .seconds(1), duration <= KeepTrying.longestGiveUp else {
            throw HaulError(.invalidArgument, "giveUpAfter must be from 1 second to 366 days")
        }
        policy.giveUpAfter = duration
        keepTrying = policy
    }
}
