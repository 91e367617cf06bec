import CHaulTestWidth
import Foundation
import HaulClient
import HaulTesting
import HaulWire
import HaulWireMapping
import Logging
import Testing

@testable import Haul

/// A temporary directory removed when the value goes away.
package final class TemporaryDirectory: Sendable {
    package let path: String

    package init() throws {
        var template = Array(
            (NSTemporaryDirectory() as NSString).appendingPathComponent("haul-test-XXXXXX").utf8CString
        )
        guard let result = mkdtemp(&template) else { throw POSIXError(.EIO) }
        path = String(cString: result)
    }

    deinit {
        try? FileManager.default.removeItem(atPath: path)
    }

    package func file(_ name: String) -> String { (path as NSString).appendingPathComponent(name) }

    /// A subdirectory, created.
    package func directory(_ name: String) throws -> String {
        let sub = file(name)
        try FileManager.default.createDirectory(atPath: sub, withIntermediateDirectories: true)
        return sub
    }
}

/// Configuration for in-process tests: quick retries and frequent checkpoints; one
/// connection per download unless a test asks for segments.
package func testConfiguration(store: String, retries: Int = 5, connections: Int = 1) -> Downloader.Configuration {
    StallWatch.startIfAsked()
    return Downloader.Configuration(
        store: .sqlite(at: store),
        connectTimeout: .seconds(5),
        readTimeout: .seconds(10),
        checkpointInterval: .milliseconds(50),
        retry: RetryPolicy(maxRetries: retries, baseDelay: .milliseconds(10), maxDelay: .milliseconds(50)),
        connectionsPerDownload: connections,
        logger: testLogger
    )
}

/// Silent, unless `HAUL_TEST_DEBUG` is set: then notices (retries and their causes) and above
/// go to standard error, to read why a download under test did what it did.
package var testLogger: Logger { debugLogger(label: "haul.test", level: .notice) }

/// A logger to standard error at `level` when `HAUL_TEST_DEBUG` is set, else silent.
package func debugLogger(label: String, level: Logger.Level) -> Logger {
    var logger = Logger(label: label, factory: { StreamLogHandler.standardError(label: $0) })
    logger.logLevel = ProcessInfo.processInfo.environment["HAUL_TEST_DEBUG"] != nil ? level : .critical
    return logger
}

/// A test server, a downloader on a fresh store and a download directory, all torn down after.
package func withHarness(
    retries: Int = 5,
    _ body: (TestServer, Downloader, TemporaryDirectory) async throws -> Void
) async throws {
    let temp = try TemporaryDirectory()
    try await TestServer.withServer { server in
        try await Downloader.withDownloader(
            configuration: testConfiguration(store: temp.file("home/haul.sqlite"), retries: retries)
        ) { downloader in
            try await body(server, downloader, temp)
        }
    }
}

/// Downloads `path` from the server into `directory` (under the name `name` when given).
package func fetch(
    _ server: TestServer,
    _ path: String,
    with downloader: Downloader,
    into directory: String,
    name: String? = nil,
    checksum: Checksum? = nil,
    overwrite: Bool = false
) async throws -> DownloadResult {
    let destination: Destination =
        name.map { .file((directory as NSString).appendingPathComponent($0)) } ?? .directory(directory)
    let task = try await downloader.download(
        DownloadRequest(url: server.url(path), destination: destination, checksum: checksum, overwrite: overwrite)
    )
    return try await task.result()
}

/// Expects `body` to throw a ``HaulError`` with `code`, and returns it.
@discardableResult
package func expectHaulError(
    _ code: HaulError.Code,
    sourceLocation: SourceLocation = #_sourceLocation,
    _ body: () async throws -> Void
) async -> HaulError? {
    do {
        try await body()
        Issue.record("expected HaulError \(code), got success", sourceLocation: sourceLocation)
        return nil
    } catch let error as HaulError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected HaulError \(code), got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

package func sha256(file path: String) -> String? { TestContent.sha256(file: path) }

/// The size of the file at `path`, or 0 when there is none: how much of a part file a
/// download has written (what the server sent may still be in the socket's buffers).
package func fileSize(_ path: String) -> Int {
    (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
}

/// Writes the first `committed` bytes of the server's content as a part file and returns
/// resume data claiming them, as a paused or crashed earlier run would have left them.
package func seedPartial(
    _ server: TestServer,
    _ path: String,
    into directory: String,
    name: String,
    committed: Int,
    validators: Validators,
    partBytes: [UInt8]? = nil
) throws -> ResumeData {
    let destination = (directory as NSString).appendingPathComponent(name)
    let bytes = partBytes ?? Array(server.content(path).prefix(committed))
    let taskID = UUID()
    try writeOwnedPart(at: destination + ".part", owner: taskID, bytes: bytes)
    return ResumeData(
        taskID: taskID,
        url: server.url(path),
        finalURL: nil,
        headers: [],
        validators: validators,
        destination: .file(destination),
        checksum: nil,
        overwrite: false,
        partPath: destination + ".part",
        segments: [.init(start: 0, end: validators.totalLength, committed: Int64(committed))]
    )
}

/// Polls `condition` every `interval` for up to `timeout`: a bound that turns a hang into a
/// failure, generous so that a loaded machine (the whole suite at once on two busy cores) passes.
package func waitUntil(
    timeout: Duration = .seconds(60),
    every interval: Duration = .milliseconds(10),
    _ condition: () async throws -> Bool
) async throws -> Bool {
    let deadline = ContinuousClock.now + timeout
    while ContinuousClock.now < deadline {
        if try await condition() { return true }
        try await Task.sleep(for: interval)
    }
    return false
}

/// Writes a part file as Haul would have created it for `owner` (marked as that task's).
package func writeOwnedPart(at path: String, owner: UUID, bytes: [UInt8]) throws {
    let file = try PartFile.create(at: path, owner: owner)
    defer { file.close() }
    try bytes.withUnsafeBytes { try file.write($0, at: 0) }
}

/// The Range of a resume from `committed`: it starts up to 64 KiB earlier, at the overlap
/// that is compared with the disk.
package func resumeRange(from committed: Int64) -> String {
    "bytes=\(committed - min(committed, TransferRules.overlapLength))-"
}

extension AsyncSequence {
    /// Every element, in order (a query's rows, in the tests that read the database).
    package func collected() async throws -> [Element] {
        var elements: [Element] = []
        for try await element in self { elements.append(element) }
        return elements
    }
}

/// Runs `work` on a thread of its own and returns its result: for seconds of synchronous CPU
/// work in a test (parsing hundreds of commands in a debug build), which on Swift's
/// cooperative pool — two threads here, shared by every test running and their in-process
/// servers — would stall the others' servers past their read timeouts. `work` records no
/// issues itself (it runs outside the test's task): it returns what the test then expects.
package func offCooperativePool<Result: Sendable>(_ work: @escaping @Sendable () -> Result) async -> Result {
    await withCheckedContinuation { continuation in
        Thread { continuation.resume(returning: work()) }.start()
    }
}

/// How many test cases Swift Testing runs at once here, as CHaulTestWidth's constructor set
/// it before the runner started (0: unbounded).
package var testParallelizationWidth: Int { Int(chaul_test_parallelization_width()) }
