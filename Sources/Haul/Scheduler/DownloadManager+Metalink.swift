import Foundation
import Logging

// MARK: - Following a Metalink

extension DownloadManager {
    /// After a download that turned out to be a Metalink completed: adds the files it
    /// describes, as aria2's `--follow-metalink` does (``DownloadRequest/followsMetalink``).
    /// Returns the result with the tasks it added, or with why it could not follow (the
    /// Metalink itself stays in place and completed).
    nonisolated func follow(_ result: DownloadResult, of record: TaskRecord) async -> DownloadResult {
        guard result.isMetalink, record.followsMetalink else { return result }
        var result = result
        do {
            let path = result.path
            let metalink = try await FileIO.run { try Metalink(contentsOf: path) }
            let requests = try DownloadManager.requests(following: metalink, at: path, from: record)
            // Made once every file is known good (names inside the Metalink's directory), on
            // FileIO: creating directories blocks.
            let directories = Set(requests.map(\.destination.directory)).sorted()
            try await FileIO.run {
                for directory in directories {
                    try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
                }
            }
            let infos = try await download(requests, priority: record.priority)
            result.followed = infos.map(\.id)
            logger.info(
                "following the Metalink: its files are added",
                metadata: ["haul.task": "\(record.id)", "files": "\(infos.count)"]
            )
        } catch {
            let reason = (error as? HaulError)?.message ?? "it cannot be read"
            result.followFailure = "The Metalink \(result.path) cannot be followed: \(reason)"
            logger.warning(
                "the Metalink cannot be followed; it is kept as downloaded",
                metadata: ["haul.task": "\(record.id)", "reason": "\(reason)"]
            )
        }
        return result
    }

    /// One request per file of `metalink`: into the Metalink's own directory (its names were
    /// checked to stay inside; the caller makes the subdirectories), from its URLs at once, checked against
    /// its strongest hash and its piece hashes, with the options of the task that fetched
    /// it. Headers that carry credentials (`Authorization`, `Cookie`) and the task's user
    /// and password go only to the host and port that served the Metalink, as across a
    /// redirect; files are not followed in turn.
    static func requests(
        following metalink: Metalink,
        at path: String,
        from record: TaskRecord
    ) throws
        -> [DownloadRequest]
    {
        let directory = (path as NSString).deletingLastPathComponent
        let origin = record.finalURL ?? record.url
        func sameOrigin(_ url: URL) -> Bool {
            url.host?.lowercased() == origin.host?.lowercased() && url.port == origin.port
                && url.scheme?.lowercased() == origin.scheme?.lowercased()
        }
        return try metalink.files.map { file in
            let destination = try Destination.file(file.name, confinedTo: directory)
            let url = file.urls[0]
            let trusted = sameOrigin(url)
            var request = DownloadRequest(
                url: url,
                destination: destination,
                headers: trusted
                    ? record.requestHeaders : record.requestHeaders.filter { !HTTPTransport.carriesCredentials($0) },
                checksum: file.hashes.first,
                overwrite: record.overwrite,
                session: record.session,
                connections: record.connections,
                minSplitSize: record.minSplitSize,
                rateLimit: record.rateLimit,
                tls: record.tls,
                proxy: record.proxy,
                credentials: trusted
                    ? record.credentials : Credentials(netrcFile: record.credentials.netrcFile),
                cookies: record.cookies
            )
            request.allowsMeteredNetwork = record.allowsMetered
            request.hooks = record.hooks
            request.mirrors = Array(file.urls.dropFirst())
            request.maxConnectionsPerServer = record.maxConnectionsPerServer
            request.pieceHashes = file.pieces
            request.followsMetalink = false
            return request
        }
    }
}
