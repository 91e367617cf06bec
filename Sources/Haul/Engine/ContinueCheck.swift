import AsyncHTTPClient
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// `continuesExistingFile` (`haul get --continue`, wget's `-c`, curl's `-C -`): a file Haul did
/// not download is taken as the beginning of this download, once the server confirms it.
struct ContinueCheck {
    let recorder: RunRecorder
    let part: RunPart
    let transport: HTTPTransport
    let environment: TransferEnvironment
    let progress: ProgressBox
    let logger: Logger

    private var task: TaskRecord { recorder.task }
    private var url: URL { task.url }

    /// A file that may be the beginning of this download.
    struct Prefix {
        var path: String
        var size: Int64
        /// Where it goes to become the part file (nil: it is already a part file's name).
        var partPath: String?
    }

    /// Finds the file to continue: the destination itself, else a `NAME.part` that no task
    /// of this store owns. A download whose name the server would choose looks under the
    /// URL's name, as wget does.
    func prefixToContinue() async throws -> Prefix? {
        if task.fileName == nil {
            let name = FileNaming.fileName(contentDisposition: nil, url: task.url)
            let path = (task.directory as NSString).appendingPathComponent(name)
            guard FileOps.regularFile(path) != nil || FileOps.regularFile(path + ".part") != nil else { return nil }
            recorder.update { $0.fileName = name }
        }
        guard let destination = task.destinationPath else { return nil }
        if let file = FileOps.regularFile(destination) {
            var partPath = destination + ".part"
            let taken = try await recorder.isTaken(partPath)
            if taken || FileOps.exists(partPath) {
                partPath = destination + ".\(task.id.uuidString.lowercased().prefix(8)).part"
            }
            return Prefix(path: destination, size: file.size, partPath: partPath)
        }
        let stray = destination + ".part"
        if let file = FileOps.regularFile(stray), !(try await recorder.isTaken(stray)) {
            return Prefix(path: stray, size: file.size, partPath: nil)
        }
        return nil
    }

    /// Continues from a file Haul did not download, when there is one and the server
    /// confirms it: its last 64 KiB (rule 7's overlap) are asked for with a range and
    /// compared, and its length must not exceed the server's. Then it becomes this task's
    /// part file (moved to `NAME.part` when it was at the destination) with every byte
    /// counted as committed, and the download fetches only the rest.
    ///
    /// - Throws: ``HaulError/Code/destinationExists`` when the file cannot be this download's
    ///   beginning (its bytes differ, it is longer, or the server serves no ranges): the file
    ///   is left as it was.
    func run() async throws {
        guard let prefix = try await prefixToContinue() else { return }
        let name = (prefix.path as NSString).lastPathComponent
        let overlap = min(prefix.size, TransferRules.overlapLength)
        var validators = Validators()
        if prefix.size > 0 {
            let start = prefix.size - overlap
            let path = prefix.path
            let local = try await FileIO.run {
                let file = try PartFile(readingAt: path)
                defer { file.close() }
                return try file.read(at: start, count: Int(overlap))
            }
            let (response, remote) = try await fetchRange(start..<prefix.size, comparing: name)
            guard remote == local else {
                throw refusal(
                    "\(name) cannot be continued: its last \(overlap) bytes differ from the server's bytes at the same place, so it is not the beginning of this file",
                    path: prefix.path
                )
            }
            validators = Validators(headers: response.headers, totalLength: response.total)
        }
        let file: PartFile
        do {
            file = try await part.adopt(at: prefix.path, movingTo: prefix.partPath)
        } catch let claim as PartFile.Claim {
            let reason =
                switch claim {
                case .foreign(let why): why
                case .exists: "its part file name is taken"
                case .missing: "it is gone"
                }
            throw refusal("\(name) cannot be continued: \(reason)", path: prefix.path)
        }
        try await recorder.continueFrom(file, validators: validators, committed: prefix.size)
        logger.notice(
            "continuing a file Haul did not download",
            metadata: ["path": "\(prefix.path)", "bytes": "\(prefix.size)", "part": "\(file.path)"]
        )
    }

    /// The bytes of `range` as the server has them, with the response that carried them and
    /// the file's full length; failures before an answer are retried.
    private func fetchRange(
        _ range: Range<Int64>,
        comparing name: String
    ) async throws -> (response: (headers: HTTPHeaders, total: Int64?), bytes: [UInt8]) {
        let response = try await environment.ask(
            url,
            headers: task.requestHeaders,
            range: "bytes=\(range.lowerBound)-\(range.upperBound - 1)",
            accepting: [206, 200, 416],
            transport: transport,
            progress: progress,
            logger: logger
        )
        recorder.update { $0.finalURL = response.url }
        let contentRange = response.headers.first(name: "Content-Range").flatMap(ContentRange.init(parsing:))
        switch response.status {
        case 416:
            await HTTPTransport.discard(response.head.body)
            let total = contentRange?.completeLength.map { "the server's file is \($0) bytes" }
            let why = total ?? "the server has no such range"
            throw refusal("\(name) cannot be continued: it is longer than this download (\(why))", path: nil)
        case 200:
            await HTTPTransport.discard(response.head.body)
            throw refusal(
                "\(name) cannot be continued: the server sends only whole files (it ignored the range)",
                path: nil
            )
        default:
            break
        }
        if let total = contentRange?.completeLength, total < range.upperBound {
            await HTTPTransport.discard(response.head.body)
            throw refusal(
                "\(name) cannot be continued: it is longer than the server's file (\(total) bytes)",
                path: nil
            )
        }
        guard let contentRange, contentRange.range == range.lowerBound...(range.upperBound - 1) else {
            await HTTPTransport.discard(response.head.body)
            throw HaulError(
                .invalidResponse,
                "The server answered a range request for \(url.absoluteString) with another range (\(response.headers.first(name: "Content-Range") ?? "none"))",
                url: url
            )
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(range.count)
        do {
            for try await chunk in response.head.body {
                guard bytes.count + chunk.readableBytes <= range.count else {
                    throw HaulError(
                        .invalidResponse,
                        "The server sent more bytes than the range it announced for \(url.absoluteString)",
                        url: url
                    )
                }
                bytes += chunk.readableBytesView
            }
        } catch let error as HaulError {
            throw error
        } catch {
            throw transport.connectionError(error, url: url)
        }
        guard bytes.count == range.count else {
            throw HaulError(.connection, "The server's answer ended early for \(url.absoluteString)", url: url)
        }
        return ((response.headers, contentRange.completeLength), bytes)
    }

    /// The error that leaves a file alone: it cannot be continued.
    private func refusal(_ message: String, path: String?) -> HaulError {
        HaulError(
            .destinationExists,
            message,
            url: url,
            path: path ?? task.destinationPath,
            hint: "It was left as it was; move it away, or use --force to download the whole file again"
        )
    }
}
