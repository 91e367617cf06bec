import ArgumentParser
import Foundation
import Haul
import Logging

extension HaulCommand {
    /// `haul get URL`: download one URL, continuing any earlier attempt at the same download.
    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Download a URL, continuing where an earlier attempt stopped.",
            discussion: """
                Interrupted downloads (Ctrl-C, a crash, kill -9, a reboot) continue from their last \
                checkpoint when the same command is run again. The file appears at its destination \
                only once complete and verified; until then the data is in <destination>.part.
                """
        )

        @Argument(help: "The http:// or https:// URL to download.")
        var url: String

        @Option(name: .shortAndLong, help: "Write the file to this path (relative to --directory if given).")
        var output: String?

        @Option(name: [.customShort("d"), .long], help: "Save into this directory (default: the current one).")
        var directory: String?

        @Option(help: "Verify the file before placing it: sha256=HEX (also sha512, sha1, md5).")
        var checksum: String?

        @Option(
            name: [.customShort("H"), .customLong("header")],
            help: "Send an extra header, 'Name: value'. Repeatable."
        )
        var headers: [String] = []

        @Option(help: "Retries in a row without progress before giving up.")
        var retries: Int = 5

        @Option(name: .customLong("connect-timeout"), help: "Seconds to wait for a connection.")
        var connectTimeout: Double = 30

        @Option(help: "Seconds without data before a connection counts as failed.")
        var timeout: Double = 60

        @Flag(help: "Replace a file already at the destination.")
        var force = false

        @Flag(name: .shortAndLong, help: "Print only errors.")
        var quiet = false

        @Flag(name: .shortAndLong, help: "Log requests and decisions to stderr.")
        var verbose = false

        @Option(name: .customLong("checkpoint-interval"), help: .hidden)
        var checkpointInterval: Double?

        func validate() throws {
            guard retries >= 0 else { throw ValidationError("--retries must be 0 or more") }
            guard connectTimeout > 0, timeout > 0 else { throw ValidationError("Timeouts must be positive") }
            if let checkpointInterval, checkpointInterval <= 0 {
                throw ValidationError("--checkpoint-interval must be positive")
            }
        }

        func run() async throws {
            do {
                let request = try makeRequest()
                var configuration = Downloader.Configuration(
                    store: .sqlite(at: HaulHome.resolve().storePath),
                    connectTimeout: .milliseconds(Int64(connectTimeout * 1000)),
                    readTimeout: .milliseconds(Int64(timeout * 1000)),
                    retry: RetryPolicy(maxRetries: retries)
                )
                if let checkpointInterval {
                    configuration.checkpointInterval = .milliseconds(Int64(checkpointInterval * 1000))
                }
                if verbose {
                    var logger = Logger(label: "haul") { StreamLogHandler.standardError(label: $0) }
                    logger.logLevel = .debug
                    configuration.logger = logger
                }
                let outcome = try await Downloader.withDownloader(configuration: configuration) { downloader in
                    let task = try await downloader.download(request)
                    return await drive(task, fallbackName: request.destination.fileName ?? url)
                }
                try report(outcome)
            } catch let error as HaulError {
                CLIError.print(error)
                throw ExitCode.failure
            }
        }

        private func makeRequest() throws -> DownloadRequest {
            let parsedURL = try DownloadRequest.parseURL(url)
            let base = directory ?? "."
            let destination: Destination
            if let output {
                guard !output.hasSuffix("/") else {
                    throw HaulError(
                        .invalidArgument,
                        "-o needs a file path, not a directory: \(output)",
                        hint: "Use -d for a directory"
                    )
                }
                destination = .file(output.hasPrefix("/") ? output : (base as NSString).appendingPathComponent(output))
            } else {
                destination = .directory(base)
            }
            return DownloadRequest(
                url: parsedURL,
                destination: destination,
                headers: try headers.map(HTTPHeaderField.init(parsing:)),
                checksum: try checksum.map(Checksum.init(parsing:)),
                overwrite: force
            )
        }

        private struct Outcome: Sendable {
            var result: Result<DownloadResult, HaulError>
            var signal: Int32?
            var progress: DownloadProgress
        }

        /// Waits for the task while drawing progress and turning SIGINT/SIGTERM into a pause.
        private func drive(_ task: DownloadTask, fallbackName: String) async -> Outcome {
            let renderer = ProgressRenderer(quiet: quiet)
            let interrupted = SignalStream.Received()
            let signals = SignalStream.watch([SIGINT, SIGTERM])
            return await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    var renderer = renderer
                    while !Task.isCancelled {
                        let progress = task.progress
                        renderer.draw(progress, name: progress.fileName ?? fallbackName)
                        try? await Task.sleep(for: .milliseconds(100))
                    }
                    renderer.finish()
                }
                group.addTask {
                    for await signal in signals {
                        interrupted.record(signal)
                        _ = try? await task.pause()
                        return
                    }
                }
                let result: Result<DownloadResult, HaulError>
                do {
                    result = .success(try await task.result())
                } catch {
                    result = .failure(error as? HaulError ?? HaulError(.connection, "\(error)"))
                }
                group.cancelAll()
                await group.waitForAll()
                return Outcome(result: result, signal: interrupted.signal, progress: task.progress)
            }
        }

        private func report(_ outcome: Outcome) throws {
            switch outcome.result {
            case .success(let result):
                guard !quiet else { return }
                if result.alreadyComplete {
                    CLIError.note("Already complete: \(result.path) (\(Format.bytes(result.bytes))); nothing fetched")
                    return
                }
                var line = "Saved \(result.path) (\(Format.bytes(result.bytes))"
                let seconds =
                    Double(result.elapsed.components.seconds) + Double(result.elapsed.components.attoseconds) / 1e18
                line += " in \(Format.seconds(result.elapsed))"
                if seconds > 0 { line += ", \(Format.speed(Double(result.bytesFetched) / seconds))" }
                if let resumedFrom = result.resumedFrom {
                    line += "; resumed at \(Format.bytes(resumedFrom)), fetched \(Format.bytes(result.bytesFetched))"
                }
                CLIError.note(line + ")")
            case .failure(let error) where error.code == .paused:
                let progress = outcome.progress
                var where_ = Format.bytes(error.resumeData?.bytesCommitted ?? progress.bytesReceived)
                if let total = progress.totalBytes { where_ += " of \(Format.bytes(total))" }
                CLIError.note("Paused at \(where_). Run the same command again to resume.")
                throw ExitCode(128 + (outcome.signal ?? SIGINT))
            case .failure(let error):
                CLIError.print(error)
                if error.resumeData != nil, !quiet {
                    CLIError.note("The data so far is kept; run the same command again to resume.")
                }
                throw ExitCode.failure
            }
        }
    }
}
