import Foundation

/// A queue of tasks several managers share, each on its own machine: the seam between the
/// core and whatever shares the work (daemons on several machines sharing one PostgreSQL store, in HaulPostgres).
///
/// A manager runs one of the queue's tasks only while it holds a *claim* on it. The queue
/// decides which waiting tasks a manager may claim (under limits over every manager), keeps
/// the claims alive, and takes back those it can no longer vouch for. A claim taken back is
/// *revoked*: the store then refuses every write about the task from the run that held it
/// (``HaulError/Code/revoked``), so a stopping run overwrites nothing another manager did,
/// and the manager stops the run (``SharedQueueNotice/revoked(_:)``).
///
/// Without one, a manager's own ``Scheduler`` alone decides what starts.
package protocol SharedQueue: Sendable {
    /// How long a claim lasts unless renewed: also how long a manager waits to read the state
    /// of a task whose claim was revoked.
    var claimDuration: Duration { get }
    /// Claims waiting tasks, in queue order, as this manager's limits (`maxRunning` at once,
    /// `perHost` per host, at most `wanted` more) and the queue's own caps over every manager
    /// leave room; their tasks are then running. Returns their ids in queue order. Called
    /// with `wanted` 0 too (a manager at its limit), so that a queue that weighs each
    /// manager's limit hears a new one (lowered, say) without waiting for room.
    func claim(wanted: Int, maxRunning: Int, perHost: Int) async throws -> [UUID]
    /// Whether this manager holds the claim on task `id` (as far as it knows).
    func holdsClaim(_ id: UUID) -> Bool
    /// The run of task `id` here has ended: a revoked claim on it is forgotten (until then it
    /// refuses every write about the task). A claim still held stays, for the task's state to
    /// be recorded.
    func runEnded(_ id: UUID)
    /// Forgets the claim on task `id`, whose run here ended without the store recording it:
    /// the claim runs out in the queue, which gives the task to the next manager that asks
    /// (this one too), to continue from its last recorded checkpoint.
    func abandonClaim(_ id: UUID)
    /// Gives one claim back: its task waits in the queue again, at its place.
    func giveBack(_ id: UUID) async throws
    /// Gives every claim still held back at once (the manager stops).
    func giveBackAll() async throws
    /// Runs `place`, which puts a finished download's file where it belongs, as the step that
    /// makes task `id` completed toward every manager: inside the store's transaction that
    /// holds the task under this manager's claim and records it completed — refused
    /// (``HaulError/Code/revoked``) before anything is placed when the claim no longer holds.
    /// A pause or cancel from another manager so lands either before (nothing placed) or
    /// after (it finds the task completed), never in between. The run's last checkpoint,
    /// when given, is recorded in the same transaction (a tiny file's whole run is then its
    /// response and this); the file's details are recorded after.
    func placeFinished(
        _ id: UUID,
        completing checkpoint: CheckpointRecord?,
        _ place: @escaping @Sendable () async throws -> Void
    ) async throws
    /// Sends the tasks running over the queue's own caps (over every manager together) back
    /// to waiting, the most recently started first, wherever they run; the managers running
    /// them stop. Returns them.
    func sendBackOverCaps() async throws -> [UUID]
    /// Keeps this manager's claims alive until cancelled, and says what it must act on.
    /// - Parameters:
    ///   - load: the manager's transfer speed now and its own rate limit (the queue shows
    ///     them, and shares its rate cap by them).
    ///   - notice: called for each thing the manager must act on, in order.
    func maintainClaims(
        load: @escaping @Sendable () async -> SharedQueueLoad,
        notice: @escaping @Sendable (SharedQueueNotice) async -> Void
    ) async
}

/// What a manager tells its ``SharedQueue`` of itself.
package struct SharedQueueLoad: Sendable, Equatable {
    /// Its downloads' speed now.
    package var bytesPerSecond: Double
    /// Its own limit on all its downloads together; nil for none.
    package var rateLimit: Int64?

    package init(bytesPerSecond: Double, rateLimit: Int64?) {
        self.bytesPerSecond = bytesPerSecond
        self.rateLimit = rateLimit
    }
}

/// What a ``SharedQueue`` tells the manager whose claims it keeps.
package enum SharedQueueNotice: Sendable, Equatable {
    /// Stop these tasks' runs: their claims were revoked (taken over, paused or cancelled by
    /// another manager, or run out unrenewed). Their runs write nothing more.
    case revoked(Set<UUID>)
    /// Tasks wait in the queue (added, resumed, given back): claim what there is room for now.
    case work
    /// The queue caps the rate of every manager together: this manager's part of it now, in
    /// bytes per second (nil: no cap). The lower of it and the manager's own limit holds.
    case rateShare(Int64?)
}
