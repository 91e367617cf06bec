import Foundation
import Haul

/// aria2's `changeUri(gid, fileIndex, delUris, addUris[, position])` on a Haul task: its URL
/// and mirrors are the one file's URIs. As aria2 does, each URI of `delUris` removes one
/// equal URI, `addUris` go in at `position` (0 first; past the end, last), a URI that cannot
/// be used is skipped rather than refused, and the answer is `[removed, added]`. Haul skips
/// what aria2 would take and Haul cannot fetch (a scheme other than http and https) and a URI
/// the list already has; it refuses to remove the last one (a task needs a URL).
struct Aria2URIChange {
    let fileIndex: Int64
    let removing: [String]
    let adding: [String]
    let position: Int?

    init(_ params: Parameters) throws {
        fileIndex = try params.integer(1)
        guard fileIndex >= 1 else {
            throw Aria2RPC.Failure.failed(
                "The integer parameter at 1 has invalid value: the value must be greater than or equal to 1."
            )
        }
        func uris(_ index: Int) throws -> [String] {
            guard let list = try params.required(index).array else {
                throw Aria2RPC.Failure.failed("The parameter at \(index) has wrong type.")
            }
            return list.compactMap(\.string)
        }
        removing = try uris(2)
        adding = try uris(3)
        // A download has at most DownloadSource.maxSources URIs: longer lists are refused
        // before any work on them (each added URI is compared with the list).
        guard removing.count + adding.count <= 4 * DownloadSource.maxSources else {
            throw Aria2RPC.Failure.failed(
                "A download has at most \(DownloadSource.maxSources) URIs: give fewer in delUris and addUris."
            )
        }
        guard let given = params.optional(4) else {
            position = nil
            return
        }
        guard let value = given.integer else { throw Aria2RPC.Failure.failed("The parameter at 4 has wrong type.") }
        guard value >= 0 else { throw Aria2RPC.Failure.failed("Position must be greater than or equal to 0.") }
        position = Int(clamping: value)
    }

    /// Changes `task`'s URIs through `manager`; `[removed, added]`.
    func apply(to task: DownloadInfo, _ manager: DownloadManager) async throws -> JSONValue {
        // One file per task: aria2 counts a download's files from 1.
        guard fileIndex == 1 else { throw Aria2RPC.Failure.failed("fileIndex is out of range") }
        var current = (task.sources.isEmpty ? [task.url] : task.sources.map(\.url)).map(\.absoluteString)
        var removing: [URL] = []
        for text in self.removing {
            guard let index = current.firstIndex(of: text), let url = URL(string: text) else { continue }
            current.remove(at: index)
            removing.append(url)
        }
        var adding: [URL] = []
        for text in self.adding where !current.contains(text) {
            guard let url = URL(string: text), (try? DownloadRequest.validate(url)) != nil else { continue }
            current.append(text)
            adding.append(url)
        }
        let (removed, added) = try await manager.changeSources(
            of: task.id,
            removing: removing,
            adding: adding,
            at: position
        )
        return [.int(Int64(removed)), .int(Int64(added))]
    }
}
