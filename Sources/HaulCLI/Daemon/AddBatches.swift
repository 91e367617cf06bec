import Foundation
import Haul

/// `haul add`'s downloads sent to the daemon in batches it accepts, so that a list of any
/// length goes in: in order, each batch all or nothing (the daemon checks every download of
/// a request before it adds any). A batch the daemon finds too large for one request (its
/// 16 MiB body limit: downloads with long headers or many cookies) is halved and sent again;
/// nothing of it was added. Each is sent only once the one before is added, and the daemon
/// waits for this command as little as it can: while a batch is on its way the next is made
/// ready (its body encoded) and the one before is read (its answer decoded).
struct AddBatches<Body: Sendable, Answer: Sendable, Heard: Sendable> {
    /// Downloads per request, at most.
    var size = AddBatchSize.defaultSize
    /// Makes a batch ready to send.
    let prepare: @Sendable ([DownloadRequest]) throws -> Body
    /// Sends one batch; answers once the daemon has added it.
    let send: (Body) async throws -> Answer
    /// Reads an answer: what is heard of each task the batch added (the task, or only its
    /// id), in its order.
    let read: @Sendable (Answer) throws -> [Heard]

    /// Sends `requests` in order; `added` hears each batch's tasks, in order, once the
    /// daemon has them.
    /// - Returns: how many were added.
    /// - Throws: the error of the batch that failed, saying how many of the list were added
    ///   before it (they stay added) and numbering a download the daemon named from the
    ///   whole list's start.
    @discardableResult
    func run(_ requests: [DownloadRequest], added: ([Heard]) throws -> Void) async throws -> Int {
        var (done, size) = (0, max(1, self.size))
        var ready: (count: Int, body: Body)?
        var reading: Task<[Heard], any Error>?
        defer { reading?.cancel() }
        /// The batch being read, to `added`; `addedSoFar`: how many the daemon has added.
        func hear(addedSoFar: Int) async throws {
            guard let task = reading.take() else { return }
            do {
                try added(try await task.value)
            } catch let error as HaulError {
                throw Self.failure(error, at: addedSoFar, batch: 0, of: requests.count)
            }
        }
        while done < requests.count {
            let count = min(size, requests.count - done)
            let body =
                try ready.flatMap { $0.count == count ? $0.body : nil } ?? prepare(Array(requests[done..<done + count]))
            let next = done + count..<min(done + count + size, requests.count)
            let (prepare, nextBatch) = (self.prepare, next.isEmpty ? nil : Array(requests[next]))
            async let nextBody = nextBatch.map(prepare)
            let answer: Answer
            do {
                answer = try await send(body)
            } catch let error as HaulError where error.status == 413 && count > 1 {
                (size, ready) = (count / 2, nil)
                continue
            } catch let error as HaulError {
                try await hear(addedSoFar: done)
                throw Self.failure(error, at: done, batch: count, of: requests.count)
            }
            try await hear(addedSoFar: done + count)
            let read = self.read
            reading = Task { try read(answer) }
            ready = try await nextBody.map { (next.count, $0) }
            done += count
        }
        try await hear(addedSoFar: done)
        return done
    }

    /// `error` of the batch of `count` that starts at list index `start`, as the whole
    /// list's: the daemon's `downloads[i]` counted from the list's start (an index outside
    /// the batch is left as the daemon said it), and what was added before it.
    static func failure(_ error: HaulError, at start: Int, batch count: Int, of total: Int) -> HaulError {
        var error = error
        let prefix = "downloads["
        if error.message.hasPrefix(prefix), let close = error.message.firstIndex(of: "]"),
            let index = Int(
                error.message[error.message.index(error.message.startIndex, offsetBy: prefix.count)..<close]
            ),
            (0..<count).contains(index)
        {
            error.message = "downloads[\(start + index)]" + error.message[close...].dropFirst()
        }
        guard start > 0 else { return error }
        error.message = "Added \(start) of \(total) downloads, then: \(error.message)"
        error.hint =
            "The \(start) added stay queued; the same command again adds the rest (a download added already is not added twice)"
        return error
    }
}

/// Downloads per request unless `--batch` says: a few hundred bytes each, well under the
/// daemon's body limit, and an add the daemon records in one transaction in about a second.
enum AddBatchSize {
    static let defaultSize = 5_000
}

extension AddBatches where Body == [DownloadRequest], Answer == [DownloadInfo], Heard == DownloadInfo {
    /// Batches sent as they are (`send` encodes them, and decodes its answer).
    init(size: Int = AddBatchSize.defaultSize, send: @escaping ([DownloadRequest]) async throws -> [DownloadInfo]) {
        self.init(size: size, prepare: { $0 }, send: send, read: { $0 })
    }
}

/// What `haul add` hears of a task added: the task, for `--json`; else only its id (the
/// daemon's answer read for nothing more: no task's URL parsed, a third of the command's CPU).
enum AddedTask: Sendable {
    case task(DownloadInfo)
    case id(UUID)
}

/// What `haul add` prints as batches are added: each task's id (or, with `--json`, one JSON
/// array of them all, written as it grows), and on a terminal a line saying how far it is.
struct AddOutput {
    let json: Bool
    let total: Int
    /// Says how far the add is on standard error: when that is a terminal and standard
    /// output (the ids) is not.
    let showsProgress: Bool
    private(set) var printed = 0

    /// For `total` downloads sent `batch` at a time.
    init(json: Bool, total: Int, batch: Int) {
        self.json = json
        self.total = total
        showsProgress = MultiProgressRenderer.stderrIsTerminal && isatty(STDOUT_FILENO) != 1 && total > batch
    }

    /// Prints a batch's tasks.
    mutating func print(_ tasks: [AddedTask]) throws {
        FileHandle.standardOutput.write(Data(try text(tasks).utf8))
        if showsProgress {
            FileHandle.standardError.write(Data("\rAdded \(printed) of \(total) downloads…".utf8))
        }
    }

    /// Ends the output: the JSON array closed, the progress line ended.
    func finish() throws {
        FileHandle.standardOutput.write(Data(try ending().utf8))
        if showsProgress { FileHandle.standardError.write(Data("\n".utf8)) }
    }

    /// What a batch's tasks print: an id a line, or the JSON array's next elements.
    mutating func text(_ tasks: [AddedTask]) throws -> String {
        var text = ""
        for added in tasks {
            switch added {
            case .task(let task) where json:
                // The pretty array, element by element: the same text as the whole array's.
                let element = try DaemonOutput.json(task).split(separator: "\n", omittingEmptySubsequences: false)
                    .map { "  " + $0 }.joined(separator: "\n")
                text += (printed == 0 ? "[\n" : ",\n") + element
            case .task(let task): text += task.id.shown + "\n"
            case .id(let id): text += id.shown + "\n"
            }
            printed += 1
        }
        return text
    }

    /// What ends the output: with `--json`, the array's end (an empty array when nothing was added).
    func ending() throws -> String {
        guard json else { return "" }
        return printed == 0 ? try DaemonOutput.json([DownloadInfo]()) + "\n" : "\n]\n"
    }
}
