import Dispatch
import Foundation
import Logging
import Synchronization

/// The longest a daemon process takes to stop once asked (SIGTERM, SIGINT, `haul daemon
/// stop`): past it, it says so and exits, as a `kill -9` would end it — which Haul is made
/// to survive (every download resumes from its last checkpoint). A stop that waits on
/// something that never comes (a database that never answers, a client that never
/// closes) must not keep the process, its lock and its socket for ever.
final class StopDeadline: Sendable {
    private let limit: Duration
    private let logger: Logger
    private let armed = Mutex(false)
    /// The signal sources that arm it, kept for the life of the daemon. Unchecked: written
    /// once, by ``watchSignals()`` before the daemon serves anything, and never read.
    nonisolated(unsafe) private var sources: [any DispatchSourceSignal] = []

    init(_ limit: Duration, logger: Logger) {
        self.limit = limit
        self.logger = logger
    }

    /// Arms it when SIGTERM or SIGINT arrives (beside the service group's own handling).
    func watchSignals() {
        for signal in [SIGTERM, SIGINT] {
            let source = DispatchSource.makeSignalSource(signal: signal, queue: .global())
            source.setEventHandler { [weak self] in self?.arm() }
            source.resume()
            sources.append(source)
        }
    }

    /// Starts the clock, once.
    func arm() {
        let first = armed.withLock { armed in
            defer { armed = true }
            return !armed
        }
        guard first else { return }
        SystemdNotification.stopping()
        let (limit, logger) = (self.limit, self.logger)
        let seconds = Double(limit.components.seconds) + Double(limit.components.attoseconds) / 1e18
        DispatchQueue.global().asyncAfter(deadline: .now() + seconds) {
            logger.error(
                "the daemon did not stop within \(limit.components.seconds) s of being asked; exiting now (downloads resume from their checkpoints at the next start)"
            )
            exit(1)
        }
    }
}
