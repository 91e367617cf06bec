import ArgumentParser
import Foundation
import Haul
import HaulWire
import HaulWireMapping
import Logging

extension HaulCommand {
    /// `haul get URL…`: download URLs (at most `-j` at a time), continuing any earlier attempt
    /// at the same downloads.
    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "get",
            abstract: "Download URLs, continuing where an earlier attempt stopped.",
            discussion: """
                Interrupted downloads (Ctrl-C, a crash, kill -9, a reboot) continue from their last \
                checkpoint when the same command is run again. The file appears at its destination \
                only once complete and verified; until then the data is in <destination>.part.

                \(ExitStatus.summary) With several files that failed, the status is their class \
                when they share one, else 1.

                \(Examples.block([
                    ("haul get https://example.org/big.iso", "into the current directory"),
                    ("haul get -o /data/big.iso URL", "into this path"),
                    ("haul get -d /data -j 4 -i urls.txt", "a list, 4 at a time"),
                    ("haul get -x 8 --limit-rate 20M URL", "8 connections, at most 20 MiB/s"),
                    ("haul get --checksum sha256=HEX URL", "verified before it is placed"),
                    ("haul get -o - URL | tar xz", "to stdout"),
                    ("haul get -N URL", "only if the server has a newer version"),
                    ("haul get --mirror URL2 --mirror URL3 URL", "one file from three servers"),
                    ("haul get -M files.meta4 -d /data", "the files a Metalink describes"),
                    ("haul get --continue URL", "finish a partial file another tool left"),
                    ("haul get --on-complete ./unpack.sh URL", "run ./unpack.sh ID PATH URL when done"),
                ]))
                """
        )

        @OptionGroup var downloads: DownloadOptions

        @Option(name: [.customShort("j"), .customLong("max-concurrent")], help: "How many files to download at once.")
        var maxConcurrent: Int = 3

        @Option(
            name: .customLong("max-connections-per-host"),
            help:
                "How many connections the files on one host hold at once, together; each holds one before any holds a second (default: -j × -x)."
        )
        var maxConnectionsPerHost: Int?

        @Flag(help: "Print events as newline-delimited JSON on stdout instead of progress.")
        var json = false

        @Option(
            name: .customLong("total-limit-rate"),
            help: "Limit the speed of all files together, e.g. 20M (bytes per second); 0 for none."
        )
        var totalLimitRate: ByteCount?

        @Option(help: "Retries in a row without progress before giving up.")
        var retries: Int = 5

        @OptionGroup(title: "Timing")
        var timing: TimingOptions

        @Flag(
            name: .customLong("no-remote-time"),
            help: "Keep the time of writing as the file's modification time (default: the server's Last-Modified)."
        )
        var noRemoteTime = false

        @Flag(
            name: .customLong("no-xattr"),
            help: "Do not record the URL in the file's user.xdg.origin.url extended attribute (default: recorded)."
        )
        var noXattr = false

        @Flag(name: .shortAndLong, help: "Print only errors.")
        var quiet = false

        @Flag(name: .shortAndLong, help: "Log requests and decisions to stderr.")
        var verbose = false

        @Option(name: .customLong("checkpoint-interval"), help: .hidden)
        var checkpointInterval: Double?

        /// The write-ahead log a get leaves in the store, at most (``Store/foldLog(ifLargerThan:)``):
        /// each 1 KiB download adds about 90 KiB to it, and the next get reads all of it.
        static let largestLog: Int64 = 1 << 20

        func validate() throws {
            guard DownloadManager.limits.contains(maxConcurrent) else {
                throw ValidationError(
                    "-j/--max-concurrent must be from \(DownloadManager.limits.lowerBound) to \(DownloadManager.limits.upperBound)"
                )
            }
            if let maxConnectionsPerHost, !DownloadManager.limits.contains(maxConnectionsPerHost) {
                throw ValidationError(
                    "--max-connections-per-host must be from \(DownloadManager.limits.lowerBound) to \(DownloadManager.limits.upperBound)"
                )
            }
            guard retries >= 0 else { throw ValidationError("--retries must be 0 or more") }
            if let checkpointInterval, !(checkpointInterval > 0 && checkpointInterval <= 3600) {
                throw ValidationError("--checkpoint-interval must be positive")
            }
            if json, downloads.streamsToStandardOutput {
                throw ValidationError("--json cannot go with -o -: stdout carries the file")
            }
            if downloads.onComplete != nil || downloads.onError != nil, downloads.streamsToStandardOutput {
                throw ValidationError("--on-complete and --on-error run for a file, and -o - writes none")
            }
            if downloads.timestamping, downloads.streamsToStandardOutput {
                throw ValidationError("-N compares with a file at the destination, and -o - writes none")
            }
            if !downloads.mirrors.isEmpty, downloads.streamsToStandardOutput {
                throw ValidationError(
                    "--mirror spreads a file's pieces over its sources, and -o - streams one connection"
                )
            }
        }

        func run() async throws {
            do {
                let requests = try downloads.requests()
                downloads.connection.warnIfInsecure()
                // One file at a time: one connection, opened without a write (Store.Readers).
                // Several at once: their reads beside their writes (200 files at -j16 took 5 %
                // longer on one connection).
                let path = HaulHome.resolve().storePath
                let readers: Store.Readers = min(maxConcurrent, requests.count) == 1 ? .serial : .concurrent
                var downloader = Downloader.Configuration(
                    store: .sqlite(at: path, readers: readers),
                    retry: RetryPolicy(maxRetries: retries),
                    overallRateLimit: totalLimitRate.flatMap { $0.bytes > 0 ? $0.bytes : nil }
                )
                timing.apply(to: &downloader)
                downloader.setsRemoteTime = !noRemoteTime
                downloader.setsOriginAttribute = !noXattr
                if let checkpointInterval {
                    downloader.checkpointInterval = .milliseconds(Int64(checkpointInterval * 1000))
                }
                if verbose {
                    var logger = Logger(label: "haul") { StreamLogHandler.standardError(label: $0) }
                    logger.logLevel = .debug
                    downloader.logger = logger
                }
                // Threads for file work as this command's connections can use at once (at least
                // four: one download's checkpoint syncs and writes), not the daemon's sixteen.
                let connections = downloads.connections ?? downloader.connectionsPerDownload
                Downloader.suggestFileThreads(max(4, min(maxConcurrent, requests.count) * connections))
                if downloads.streamsToStandardOutput {
                    // Nothing is recorded: the store stays untouched.
                    downloader.store = .inMemory
                    try await StandardOutputStream(request: requests[0], quiet: quiet).run(downloader)
                    return
                }
                // The store opened while the arguments were parsed, when it is the one wanted
                // (else now); the event loops started while it opens.
                Downloader.startEventLoops()
                let ahead = try await StoreHeadStart.take(path: path, readers: readers)
                let store = if let ahead { ahead } else { try await Store.opened(at: path, readers: readers) }
                downloader.store = .store(store)
                // Only the downloads this command asks for run: leftovers of other commands in
                // the same store wait for their own command (or the daemon).
                var configuration = DownloadManager.Configuration(
                    downloader: downloader,
                    maxConcurrentDownloads: maxConcurrent,
                    // All -j files may be on one host.
                    maxDownloadsPerHost: maxConcurrent,
                    recoversTasks: false
                )
                // Unless told, each of the -j files may open its -x connections to one host.
                configuration.maxConnectionsPerHost =
                    maxConnectionsPerHost
                    ?? min(
                        DownloadManager.limits.upperBound,
                        maxConcurrent * (downloads.connections ?? downloader.connectionsPerDownload)
                    )
                configuration.watchesNetwork = true
                configuration.networkWaitLimit = .seconds(timing.waitForNetwork?.seconds ?? 600)
                let (quiet, json) = (self.quiet, self.json)
                let summary = try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                    try await GetSession(manager: manager, requests: requests, quiet: quiet, json: json).run()
                }
                // The next get indexes the log the store keeps: at most a MiB of it.
                await store.foldLog(ifLargerThan: Self.largestLog)
                try report(summary)
            } catch let error as HaulError {
                CLIError.print(error)
                throw ExitStatus(error).exit
            }
        }

        private func report(_ summary: GetSession.Summary) throws {
            if summary.files.count == 1, let file = summary.files.first {
                try reportSingle(file, signal: summary.signal, stopped: file.id.flatMap { summary.stopped[$0] })
                return
            }
            var ok = 0
            var bytes: Int64 = 0
            var failures: [(String, HaulError)] = []
            for file in summary.files {
                switch file.outcome {
                case .completed(let result)?:
                    ok += 1
                    bytes += result.bytesFetched
                case .failed(let error)?: failures.append((file.url, error))
                case nil: break
                }
            }
            let unfinished = summary.files.count - ok - failures.count
            if summary.signal == SIGPIPE { throw ExitCode(128 + SIGPIPE) }  // Quietly: the reader left.
            if !quiet {
                let seconds =
                    Double(summary.elapsed.components.seconds) + Double(summary.elapsed.components.attoseconds) / 1e18
                var line = summary.signal == nil ? "Done: " : "Stopped: "
                line += "\(ok) ok, \(failures.count) failed"
                if unfinished > 0 { line += ", \(unfinished) unfinished" }
                line += "; \(Format.bytes(bytes)) fetched in \(Format.seconds(summary.elapsed))"
                if seconds > 0 { line += " (\(Format.speed(Double(bytes) / seconds)))" }
                CLIError.note(line)
                if unfinished > 0 { CLIError.note("Run the same command again to continue the unfinished files.") }
            }
            for (url, error) in failures {
                // The URL once: most errors name it already.
                let shown = Redaction.text(url)
                let text = error.description
                Output.error(text.contains(shown) ? "haul: failed: \(text)\n" : "haul: failed: \(shown): \(text)\n")
            }
            if let signal = summary.signal { throw ExitCode(128 + signal) }
            if !failures.isEmpty { throw ExitStatus(failures.map(\.1)).exit }
        }

        private func reportSingle(
            _ file: (url: String, id: UUID?, outcome: GetSession.Outcome?),
            signal: Int32?,
            stopped info: DownloadInfo?
        ) throws {
            switch file.outcome {
            case .completed(let result)?:
                if !quiet && !json { CLIError.note(GetSession.savedLine(result)) }
            case .failed(let error)?:
                CLIError.print(error)
                if error.resumeData != nil, !quiet, error.hint?.contains("again") != true {
                    CLIError.note("The data so far is kept; run the same command again to resume.")
                }
                throw ExitStatus(error).exit
            case nil:
                if signal == SIGPIPE { throw ExitCode(128 + SIGPIPE) }
                if !quiet, let info {
                    var position = Format.bytes(info.bytesCommitted)
                    if let total = info.totalBytes { position += " of \(Format.bytes(total))" }
                    CLIError.note("Paused at \(position). Run the same command again to resume.")
                }
                throw ExitCode(128 + (signal ?? SIGINT))
            }
        }
    }
}
