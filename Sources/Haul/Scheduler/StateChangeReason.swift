/// Why a task moved from one state to another: carried by
/// ``DownloadEvent/stateChanged(id:from:to:reason:)``, the daemon's event log (`reason`) and
/// `haul watch`. A task waiting for the network says whether its route is gone
/// (``noRoute``) or metered (``metered``); the values are stable names for programs.
public enum StateChangeReason: String, Sendable, Codable, CaseIterable {
    /// The scheduler gave it a slot.
    case started
    /// Paused by request.
    case paused
    /// It gave its slot back and waits again: the concurrency limit went down, or the
    /// manager is stopping.
    case yielded
    /// The store refused to record its progress (a full disk, say); it runs again once the
    /// store takes writes.
    case storeRefused
    /// Its claim in a shared queue (daemons sharing one store) was revoked — it ran out, or the task
    /// was changed elsewhere: its transfer here stopped, and whoever holds the task now
    /// continues it.
    case revoked
    /// Its verified file is in place.
    case completed
    /// It failed; the failure event carries the reason.
    case failed
    /// Resumed by request.
    case resumed
    /// Cancelled by request.
    case cancelled
    /// Found running by a manager that opened its store after the process died.
    case recovered
    /// It failed in a way that may pass and waits for its next try.
    case retryLater
    /// The time of its next try came.
    case retryDue
    /// No usable route to its server: a link down, a route gone, no network.
    case noRoute
    /// Its route goes out of a metered interface, and metered networks are not allowed.
    case metered
    /// A usable route it may use is back (or the policy now allows the one there is).
    case networkAvailable
    /// It waited for the network longer than allowed.
    case networkWaitExpired

    /// The reason a state-machine event gives when nothing more specific is known.
    init(_ event: TaskStateMachine.Event) {
        switch event {
        case .start: self = .started
        case .pause: self = .paused
        case .yield: self = .yielded
        case .complete: self = .completed
        case .fail: self = .failed
        case .resume: self = .resumed
        case .cancel: self = .cancelled
        case .recover: self = .recovered
        case .retryLater: self = .retryLater
        case .retryDue: self = .retryDue
        case .offline: self = .noRoute
        case .online: self = .networkAvailable
        case .giveUp: self = .networkWaitExpired
        }
    }
}
