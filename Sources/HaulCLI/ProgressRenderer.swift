import Foundation
import Haul

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Draws a download's progress on stderr: a bar redrawn in place on a terminal (at most ten
/// times a second, by the caller's clock), an occasional plain line otherwise, nothing when quiet.
struct ProgressRenderer {
    enum Mode {
        case terminal
        case lines
        case quiet
    }

    let mode: Mode
    private var lastLine = ContinuousClock.now
    private var drewBar = false
    /// Plain-line mode prints this often.
    static let lineInterval: Duration = .seconds(5)

    init(quiet: Bool) {
        if quiet {
            mode = .quiet
        } else if isatty(STDERR_FILENO) == 1, ProcessInfo.processInfo.environment["TERM"] != "dumb" {
            mode = .terminal
        } else {
            mode = .lines
        }
    }

    mutating func draw(_ progress: DownloadProgress, name: String) {
        switch mode {
        case .quiet: return
        case .terminal:
            let line = ProgressRenderer.barLine(progress, name: name, width: ProgressRenderer.terminalWidth())
            FileHandle.standardError.write(Data(("\r" + line + "\u{1B}[K").utf8))
            drewBar = true
        case .lines:
            let now = ContinuousClock.now
            guard now - lastLine >= ProgressRenderer.lineInterval else { return }
            lastLine = now
            FileHandle.standardError.write(Data((ProgressRenderer.plainLine(progress, name: name) + "\n").utf8))
        }
    }

    /// Ends the bar's line so the next message starts on a fresh one.
    mutating func finish() {
        if drewBar {
            FileHandle.standardError.write(Data("\r\u{1B}[K".utf8))
            drewBar = false
        }
    }

    static func plainLine(_ progress: DownloadProgress, name: String) -> String {
        var line = "\(name): "
        if let fraction = progress.fractionCompleted {
            line += String(format: "%.0f%% ", fraction * 100)
            line += "\(Format.bytes(progress.bytesReceived)) of \(Format.bytes(progress.totalBytes ?? 0))"
        } else {
            line += Format.bytes(progress.bytesReceived)
        }
        if progress.bytesPerSecond > 0 { line += " at \(Format.speed(progress.bytesPerSecond))" }
        if let eta = progress.estimatedTimeRemaining { line += ", ETA \(Format.duration(eta))" }
        return line
    }

    static func barLine(_ progress: DownloadProgress, name: String, width: Int) -> String {
        var stats = ""
        if let fraction = progress.fractionCompleted {
            stats += String(format: "%3.0f%% ", fraction * 100)
        }
        stats += Format.bytes(progress.bytesReceived)
        if let total = progress.totalBytes { stats += "/\(Format.bytes(total))" }
        stats += "  " + (progress.bytesPerSecond > 0 ? Format.speed(progress.bytesPerSecond) : "--/s")
        if let eta = progress.estimatedTimeRemaining {
            stats += "  ETA \(Format.duration(eta))"
        }
        let nameWidth = min(max(8, width / 4), 30)
        var shortName = name
        if shortName.count > nameWidth { shortName = String(shortName.prefix(nameWidth - 1)) + "…" }
        shortName = shortName.padding(toLength: nameWidth, withPad: " ", startingAt: 0)
        let barWidth = width - nameWidth - stats.count - 5
        guard barWidth >= 10, let fraction = progress.fractionCompleted else {
            return String("\(shortName) \(stats)".prefix(max(0, width - 1)))
        }
        let filled = Int(Double(barWidth) * fraction)
        let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: barWidth - filled)
        return "\(shortName) \(bar) \(stats)"
    }

    static func terminalWidth() -> Int {
        var size = winsize()
        if ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 { return Int(size.ws_col) }
        return 80
    }
}
