import ArgumentParser
import Foundation
import Haul
import HaulWire
import HaulWireMapping
import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// `haul get -o - URL`: the body to stdout as it arrives (``Downloader/stream(_:progress:into:)``),
/// progress on stderr, as `curl URL` and `wget -O - URL` do.
///
/// Writes to stdout block when the reader is slow (a pipe's backpressure), so they run on
/// NIO's thread pool. A reader that leaves (`| head -c 100`) ends the command quietly with
/// 141, as SIGPIPE would; Ctrl-C keeps its default (130): there is nothing to checkpoint.
struct StandardOutputStream {
    let request: DownloadRequest
    let quiet: Bool

    /// The progress the stream last reported, for the renderer.
    final class Latest: Sendable {
        let value = Mutex<DownloadProgress?>(nil)
    }

    /// The reader of stdout went away.
    struct Closed: Error {}

    func run(_ configuration: Downloader.Configuration) async throws {
        let latest = Latest()
        let name = request.url.lastPathComponent.isEmpty ? "stdout" : request.url.lastPathComponent
        let result: StreamResult
        do {
            result = try await Downloader.withDownloader(configuration: configuration) { downloader in
                try await withThrowingTaskGroup(of: StreamResult?.self) { group in
                    group.addTask {
                        try await downloader.stream(
                            request,
                            progress: { progress in latest.value.withLock { $0 = progress } }
                        ) {
                            buffer in try await StandardOutputStream.write(buffer)
                        }
                    }
                    if !quiet {
                        group.addTask {
                            var renderer = Renderer(name: name)
                            while !Task.isCancelled {
                                renderer.draw(latest.value.withLock { $0 })
                                try? await Task.sleep(for: .milliseconds(100))
                            }
                            renderer.finish(latest.value.withLock { $0 })
                            return nil
                        }
                    }
                    defer { group.cancelAll() }
                    while let child = try await group.next() {
                        if let child { return child }
                    }
                    throw CancellationError()
                }
            }
        } catch is Closed {
            throw ExitCode(128 + SIGPIPE)
        }
        if !quiet {
            var line = "Wrote \(Format.bytes(result.bytes)) to stdout in \(Format.seconds(result.elapsed))"
            let seconds =
                Double(result.elapsed.components.seconds) + Double(result.elapsed.components.attoseconds) / 1e18
            if seconds > 0 { line += " (\(Format.speed(Double(result.bytes) / seconds)))" }
            if result.totalBytes == nil {
                line += "; the server gave no length, so a cut connection would look the same as the end"
            }
            CLIError.note(line)
        }
    }

    /// Writes all of `buffer` to stdout, on NIO's thread pool.
    static func write(_ buffer: ByteBuffer) async throws {
        let failure: Int32? = try await NIOThreadPool.singleton.runIfActive {
            buffer.withUnsafeReadableBytes { bytes -> Int32? in
                var offset = 0
                while offset < bytes.count {
                    let n = SystemCall.write(1, bytes.baseAddress! + offset, bytes.count - offset)
                    if n < 0 {
                        if errno == EINTR { continue }
                        return errno
                    }
                    offset += n
                }
                return nil
            }
        }
        guard let failure else { return }
        if failure == EPIPE { throw Closed() }
        throw HaulError.fileSystem("write to", path: "stdout", errno: failure)
    }

    /// Progress on stderr: a bar redrawn in place on a terminal, a plain line every few
    /// seconds otherwise.
    struct Renderer {
        let name: String
        let terminal = MultiProgressRenderer.stderrIsTerminal
        var lastLine = ContinuousClock.now
        var drawn = false
        var announcedRetries = 0

        mutating func draw(_ progress: DownloadProgress?) {
            guard let progress else { return }
            announceRetry(progress)
            if terminal {
                let line = ProgressRenderer.barLine(progress, name: name, width: ProgressRenderer.terminalWidth())
                Output.error("\r\u{1B}[K" + line)
                drawn = true
            } else if ContinuousClock.now - lastLine >= MultiProgressRenderer.lineInterval,
                let line = ProgressRenderer.plainLine(progress, name: name)
            {
                lastLine = .now
                Output.error(line + "\n")
            }
        }

        /// Says a retry once, above the bar.
        private mutating func announceRetry(_ progress: DownloadProgress) {
            guard progress.retries > announcedRetries, let retry = progress.lastRetry else { return }
            announcedRetries = progress.retries
            Output.error((drawn ? "\r\u{1B}[K" : "") + ProgressRenderer.retryLine(retry, name: nil) + "\n")
        }

        /// Says what was not said yet, and clears the bar.
        mutating func finish(_ progress: DownloadProgress?) {
            if let progress { announceRetry(progress) }
            if drawn { Output.error("\r\u{1B}[K") }
        }
    }
}
