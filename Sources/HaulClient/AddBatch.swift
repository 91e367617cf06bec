import Foundation
import Haul
import HaulWire
import HaulWireMapping
import NIOCore

/// A batch of downloads encoded for ``HaulClient/post(_:)``: made ready (while an earlier
/// batch is on its way, say) before it is sent.
public struct AddBatchBody: Sendable {
    let bytes: ByteBuffer

    /// `requests` as `POST /v1/tasks` carries them.
    public init(_ requests: [DownloadRequest], priority: Int? = nil) throws {
        let body = API.AddRequest(downloads: requests.map(API.AddRequest.Download.init), priority: priority)
        bytes = ByteBuffer(bytes: try HaulJSON.encoder().encode(body))
    }
}

/// The daemon's answer to ``HaulClient/post(_:)``: every download of the batch added (or
/// found), the tasks not yet decoded (decoded while the next batch is on its way).
public struct AddBatchAnswer: Sendable {
    let bytes: ByteBuffer

    /// The tasks the daemon answered, in the batch's order.
    /// - Throws: ``HaulError/Code/invalidResponse`` when the answer cannot be read.
    public func tasks() throws -> [DownloadInfo] {
        let tasks: [API.Task] = try HaulClient.decode(bytes, of: "POST", "/tasks")
        return try tasks.map(DownloadInfo.init)
    }

    /// Only the ids of the tasks the daemon answered, in the batch's order.
    /// - Throws: ``HaulError/Code/invalidResponse`` when the answer cannot be read.
    public func ids() throws -> [UUID] {
        let tasks: [TaskID] = try HaulClient.decode(bytes, of: "POST", "/tasks")
        return tasks.map(\.id)
    }

    private struct TaskID: Decodable {
        let id: UUID
    }
}
