import Foundation
import Logging

/// What a transfer needs from its downloader.
struct TransferEnvironment: Sendable {
    var transport: HTTPTransport
    var store: any TaskStore
    var checkpointInterval: Duration
    var checkpointBytes: Int64
    var retry: RetryPolicy
    /// Connections per download when the request does not say.
    var connections: Int
    /// The smallest segment worth its own connection.
    var minSplitSize: Int64
    /// The limit all downloads of the downloader share.
    var globalLimiter: RateLimiter
    /// The speed each connection must keep (``SpeedFloor``); nil for none.
    var lowestSpeed: LowestSpeed?
    /// The most connections any one download may open (the manager's per-host cap).
    var connectionCap = Int.max
    /// The connections per host the manager's downloads share; nil: each download's own.
    var hostConnections: HostConnections?
    /// Whether a URL's server has no usable route now: a retry would only wait for nothing.
    var isOffline: @Sendable (URL) -> Bool = { _ in false }
    /// Whether a failure is left for the caller to record: a manager that may keep trying or
    /// wait for the network decides the state, and no reader sees a `failed` in between.
    var defersFailureRecord = false
    /// Whether the finished file takes the server's `Last-Modified` as its modification time.
    var setsRemoteTime = true
    /// Whether the finished file gets the `user.xdg.origin.url` extended attribute.
    var setsOriginAttribute = true
    /// The time transfers measure and wait by (the downloader's clock).
    var timeline = Timeline()
    /// Where transfers write what they receive (the downloader's).
    var writePlacement = WritePlacement()
    /// Runs the placement of a finished file (its rename) as the step that makes the task
    /// completed: at once on its own, or guarded by a shared queue
    /// (``SharedQueue/placeFinished(_:completing:_:)``), which records the run's last
    /// checkpoint in the same transaction. Returns whether it recorded that checkpoint.
    var placeFinished:
        @Sendable (UUID, CheckpointRecord?, @escaping @Sendable () async throws -> Void) async throws -> Bool = {
            _,
            _,
            place in
            try await place()
            return false
        }
    var logger: Logger

    /// One request before a run's connections (`-N`'s condition, `--continue`'s check),
    /// retried as an opening is (``RetryPolicy/retrying(progress:logger:timeline:offline:_:)``)
    /// until the server answers with one of `accepted`; another status fails as it says.
    func ask(
        _ url: URL,
        headers: [HTTPHeaderField],
        range: String?,
        accepting accepted: Set<Int>,
        transport: HTTPTransport,
        progress: ProgressBox,
        logger: Logger
    ) async throws -> HTTPTransport.Response {
        let isOffline = isOffline
        func offline() -> Bool { isOffline(url) }
        return try await retry.retrying(progress: progress, logger: logger, timeline: timeline, offline: offline) {
            let response = try await transport.get(url, headers: headers, range: range, ifRange: nil, logger: logger)
            guard accepted.contains(response.status) else { throw await HTTPTransport.failure(response, url: url) }
            return response
        }
    }
}
