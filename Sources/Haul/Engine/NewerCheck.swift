import AsyncHTTPClient
import Foundation
import Logging
import NIOHTTP1

/// `checkNewer` (`haul get -N`, wget's `-N`, curl's `-z`): a file at the destination is
/// compared with the server's by a conditional request before anything else happens.
struct NewerCheck {
    enum Answer {
        /// The server has nothing newer: the file stays, and this is the result.
        case upToDate(DownloadResult)
        /// The server's newer version, its body not read yet.
        case newer(HTTPTransport.Response)
        /// Nothing at the destination to compare: an ordinary download follows.
        case noFile
    }

    let recorder: RunRecorder
    let transport: HTTPTransport
    let environment: TransferEnvironment
    let progress: ProgressBox
    let logger: Logger

    private var task: TaskRecord { recorder.task }

    /// Asks the server for the file only if it changed since the one at the destination.
    ///
    /// - A file this task completed is asked about with `If-None-Match` and its recorded
    ///   ETag, else `If-Modified-Since` and its recorded `Last-Modified`.
    /// - A file Haul did not download (or whose record has no validator) is asked about with
    ///   `If-Modified-Since` and its modification time, as wget does (Haul sets the
    ///   server's `Last-Modified` on what it downloads).
    ///
    /// A 304 means up to date. So does a 200 from a server that ignores conditions when its
    /// validators and length prove it is the same file (or, for a file Haul did not
    /// download, it is no newer and the same length). Any other 200 is the newer version.
    /// Failures before an answer are retried as an opening's are.
    ///
    /// A download whose name the server would choose is compared with the file named after
    /// the URL, as wget does; the newer version then keeps that name.
    func ask(completed done: DownloadResult?) async throws -> Answer {
        if task.fileName == nil {
            let name = FileNaming.fileName(contentDisposition: nil, url: task.url)
            guard FileOps.regularFile((task.directory as NSString).appendingPathComponent(name)) != nil else {
                return .noFile
            }
            recorder.update { $0.fileName = name }
        }
        guard let destination = task.destinationPath, let file = FileOps.regularFile(destination) else {
            return .noFile
        }
        let recorded = done != nil ? task.validators : Validators()
        var condition: HTTPHeaderField
        if let etag = recorded.etag {
            condition = HTTPHeaderField(name: "If-None-Match", value: etag)
        } else {
            let since = recorded.lastModified ?? HTTPDate.format(file.modified)
            condition = HTTPHeaderField(name: "If-Modified-Since", value: since)
        }
        let headers = task.requestHeaders.filter {
            !["if-none-match", "if-modified-since"].contains($0.name.lowercased())
        }
        let response = try await environment.ask(
            task.url,
            headers: headers + [condition],
            range: nil,
            accepting: [200, 304],
            transport: transport,
            progress: progress,
            logger: logger
        )
        recorder.update { $0.finalURL = response.url }
        let same = TransferRules.isUpToDate(
            status: response.status,
            headers: response.headers,
            recorded: done != nil ? recorded : nil,
            size: file.size,
            modified: file.modified
        )
        guard same else {
            logger.info(
                "the server has a newer version",
                metadata: ["path": "\(destination)", "condition": "\(condition.name): \(condition.value)"]
            )
            return .newer(response)
        }
        await HTTPTransport.discard(response.head.body)
        logger.info("up to date", metadata: ["path": "\(destination)", "status": "\(response.status)"])
        return .upToDate(try await keep(file, at: destination, downloadedHere: done != nil))
    }

    /// The file at `destination`, found up to date, kept as the task's result; one Haul did
    /// not download is recorded as completed, with the time it was compared by.
    private func keep(
        _ file: (size: Int64, modified: Date),
        at destination: String,
        downloadedHere: Bool
    ) async throws -> DownloadResult {
        if !downloadedHere {
            // A file Haul did not download, now known to be the server's: recorded as
            // completed, with the time it was compared by.
            try await recorder.keepExisting(size: file.size, modified: file.modified)
        }
        if task.state != .completed { try await recorder.record(.completed) }
        progress.update {
            $0.fileName = task.fileName
            $0.totalBytes = file.size
            $0.bytesReceived = file.size
        }
        var result = DownloadResult(
            taskID: task.id,
            path: destination,
            bytes: file.size,
            bytesFetched: 0,
            resumedFrom: nil,
            alreadyComplete: true
        )
        result.notModified = true
        return result
    }
}
