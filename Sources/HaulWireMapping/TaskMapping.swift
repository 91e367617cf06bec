import Foundation
import Haul
import HaulWire

// A task as the library knows it (``DownloadInfo``) and as the daemon answers with it
// (``API/Task``): the daemon redacts URLs and messages as it writes; the client reads every
// field back, leaving out what it cannot use (a source whose URL is not one, an error code
// this version does not know) rather than failing.

extension API.Task {
    /// The answer for `info`, with its URLs' credentials and its messages' secrets redacted.
    public init(_ info: DownloadInfo) {
        self.init(
            id: info.id,
            url: Redaction.url(info.url),
            directory: info.directory,
            state: API.TaskState(info.state),
            priority: info.priority,
            session: info.session
        )
        path = info.path
        bytesCommitted = info.bytesCommitted
        totalBytes = info.totalBytes
        errorMessage = info.errorMessage.map(Redaction.text)
        rateLimit = info.rateLimit
        connections = info.connections
        nextTryAt = info.nextTryAt
        errorCode = info.errorCode?.description
        node = info.node
        sources =
            info.sources.isEmpty
            ? nil
            : info.sources.map {
                Source(
                    url: Redaction.url($0.url),
                    verified: $0.verified,
                    dropped: $0.dropped.map(Redaction.text),
                    bytes: $0.bytes
                )
            }
    }
}

extension DownloadInfo {
    /// The task the daemon answered with.
    /// - Throws: ``HaulError/Code/invalidResponse`` when its URL is not one.
    public init(_ task: API.Task) throws {
        guard let url = URL(string: task.url) else {
            throw HaulError(
                .invalidResponse,
                "The daemon answered with a task whose URL is not one: \(task.url.prefix(200))"
            )
        }
        self.init(
            id: task.id,
            url: url,
            path: task.path,
            directory: task.directory,
            state: TaskState(task.state),
            priority: task.priority,
            bytesCommitted: task.bytesCommitted,
            totalBytes: task.totalBytes,
            errorMessage: task.errorMessage,
            session: task.session,
            rateLimit: task.rateLimit,
            connections: task.connections,
            nextTryAt: task.nextTryAt,
            errorCode: task.errorCode.flatMap(HaulError.Code.init(name:))
        )
        node = task.node
        sources = (task.sources ?? []).compactMap { source in
            URL(string: source.url).map {
                DownloadSource(url: $0, verified: source.verified, dropped: source.dropped, bytes: source.bytes)
            }
        }
    }
}
