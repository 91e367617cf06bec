import Foundation

/// A download's event as plain, Codable values: what `haul get --json` prints, what the
/// daemon keeps in its per-session event log and sends to its clients.
///
/// The JSON keys are short and stable: `event` says which kind it is and `id` is the task;
/// the other keys appear when the kind has them.
public struct EventRecord: Codable, Sendable, Equatable {
    /// Which kind of event.
    public enum Kind: String, Codable, Sendable {
        case added, state, progress, resumed, completed, failed
        /// The network changed; about no task (`id` is absent).
        case network
        /// A hook ran when the task ended.
        case hook
    }

    /// The event's place in its session's log; nil for events that are not logged (progress).
    public var eventID: Int64?
    /// The session of the task, when known.
    public var session: String?
    /// The task; nil for `network`, which is about all of them.
    public var taskID: UUID?
    public var kind: Kind
    /// When it happened.
    public var time: Date?
    /// `added`: the URL and the state it was added in.
    public var url: String?
    public var state: API.TaskState?
    /// `state`: the move, and why (``API/StateChangeReason``: `noRoute` and `metered` for a
    /// task that waits for the network).
    public var from: API.TaskState?
    public var to: API.TaskState?
    public var reason: API.StateChangeReason?
    /// `progress`: bytes on disk or in flight, bytes fetched by this run, the total when known,
    /// speed over at least a second and the estimated seconds left.
    public var received: Int64?
    public var thisRun: Int64?
    public var total: Int64?
    public var bytesPerSecond: Int64?
    public var etaSeconds: Int64?
    /// `resumed`: where the task continued from.
    public var offset: Int64?
    /// `completed`: the file, its size, the bytes fetched by this run, and whether it was already there.
    public var path: String?
    public var bytes: Int64?
    public var fetched: Int64?
    public var alreadyComplete: Bool?
    /// With `alreadyComplete`: the server was asked for a newer version (`-N`) and had none.
    public var notModified: Bool?
    /// `completed`: false when the server gave no length and the end could not be confirmed
    /// (the file may be truncated); absent otherwise.
    public var lengthConfirmed: Bool?
    /// `completed`: what the bytes were checked against (``DownloadResult/verifiedAgainst``):
    /// `checksum`, `pieceHashes`, a server's digest header, or `sampled` (each stretch a
    /// mirror wrote compared with the URL's in one window); absent when nothing was.
    public var verifiedAgainst: String?
    /// `failed`: the reason, the error code, the HTTP status, and whether it can be resumed.
    public var error: String?
    public var code: String?
    public var status: Int?
    public var resumable: Bool?
    /// `hook`: when it ran (`complete` or `error`), the program, its exit status (absent when
    /// it did not start or was killed), and why it failed (absent when it exited 0).
    public var hook: API.HookMoment?
    public var program: String?
    public var exitStatus: Int32?
    /// `network`: the interface of the default route and its address (absent when there
    /// is none), whether it is up with a carrier, whether it is metered, and whether
    /// downloads may use metered networks.
    public var interface: String?
    public var address: String?
    public var connected: Bool?
    public var metered: Bool?
    public var allowMetered: Bool?

    enum CodingKeys: String, CodingKey {
        case eventID, session
        case taskID = "id"
        case kind = "event"
        case time, url, state, from, to, reason, received, thisRun, total,
            bytesPerSecond, etaSeconds, offset, path, bytes, fetched, alreadyComplete, notModified, lengthConfirmed,
            verifiedAgainst,
            error,
            code,
            status, resumable, hook, program, exitStatus, interface, address, connected, metered, allowMetered
    }

    public init(taskID: UUID?, kind: Kind, session: String? = nil, time: Date? = Date()) {
        self.taskID = taskID
        self.kind = kind
        self.session = session
        self.time = time
    }

    /// Decodes a line written by ``jsonLine()``.
    public init(jsonLine: some StringProtocol) throws {
        self = try API.JSON.decoder.decode(EventRecord.self, from: Data(jsonLine.utf8))
    }

    /// The task state this event tells a listener about, if any. `completed` and `failed`
    /// are told by their own events, which carry the file or the reason.
    package var announcedState: API.TaskState? {
        switch kind {
        case .added: return state ?? .queued
        case .state: return to == .completed || to == .failed ? nil : to
        case .completed: return .completed
        case .failed: return .failed
        case .progress, .resumed, .network, .hook: return nil
        }
    }
}
