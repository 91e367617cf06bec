import Foundation
import Haul
import HaulWire
import HaulWireMapping

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Draws progress on stderr: on a terminal a block redrawn in place (one line per running
/// file and a total line; just the bar for a single file), at most ten times a second by the
/// caller's clock; otherwise a plain line every few seconds and no escape codes; nothing
/// when quiet. Lines for finished files scroll above the block.
struct MultiProgressRenderer {
    enum Mode {
        case terminal
        case lines
        case quiet
    }

    let mode: Mode
    /// One file: just its bar. A file that turns out to be a Metalink brings others.
    private(set) var single: Bool
    private var lastLine = ContinuousClock.now
    private var drawnLines = 0
    /// Plain-line mode prints this often.
    static let lineInterval: Duration = .seconds(5)
    /// Running files shown on a terminal; the rest are counted on the total line.
    static let maxRows = 10

    /// Whether standard error is a terminal that redraws a line in place (not `TERM=dumb`):
    /// where progress is drawn as a bar, not printed as lines.
    static var stderrIsTerminal: Bool {
        isatty(STDERR_FILENO) == 1 && ProcessInfo.processInfo.environment["TERM"] != "dumb"
    }

    init(quiet: Bool, single: Bool) {
        self.single = single
        if quiet {
            mode = .quiet
        } else if MultiProgressRenderer.stderrIsTerminal {
            mode = .terminal
        } else {
            mode = .lines
        }
    }

    mutating func draw(_ board: GetSession.Board) {
        guard mode != .quiet else { return }
        let snapshot = board.state.withLock { state -> GetSession.Board.State in
            let copy = state
            state.finishedLines.removeAll()
            return copy
        }
        if snapshot.order.count > 1 { single = false }
        let finished = single ? [] : snapshot.finishedLines
        let notices = board.takeNotices()
        switch mode {
        case .quiet: return
        case .terminal:
            var text = clearBlock()
            for line in notices { text += line + "\n" }
            for line in finished { text += line + "\n" }
            let rows = blockLines(snapshot, width: ProgressRenderer.terminalWidth())
            text += rows.joined(separator: "\n")
            drawnLines = rows.count
            Output.error(text)
        case .lines:
            let lines = notices + finished
            if !lines.isEmpty { Output.error(lines.map { $0 + "\n" }.joined()) }
            let now = ContinuousClock.now
            guard now - lastLine >= MultiProgressRenderer.lineInterval else { return }
            lastLine = now
            let line: String
            if single, let id = snapshot.order.first, let progress = snapshot.progress[id] {
                guard let plain = ProgressRenderer.plainLine(progress, name: snapshot.names[id] ?? "") else { return }
                line = plain
            } else if single {
                return
            } else {
                line = totalLine(snapshot)
            }
            Output.error((line + "\n"))
        }
    }

    /// Clears the block and prints what finished since the last draw.
    mutating func finish(_ board: GetSession.Board) {
        guard mode != .quiet else { return }
        let (finished, count) = board.state.withLock { state -> ([String], Int) in
            defer { state.finishedLines.removeAll() }
            return (state.finishedLines, state.order.count)
        }
        if count > 1 { single = false }
        var text = mode == .terminal ? clearBlock() : ""
        for line in board.takeNotices() { text += line + "\n" }
        if !single { for line in finished { text += line + "\n" } }
        Output.error(text)
        drawnLines = 0
    }

    /// Moves to the start of the block and erases it.
    private func clearBlock() -> String {
        guard drawnLines > 0 else { return "\r\u{1B}[K" }
        return "\r" + String(repeating: "\u{1B}[1A", count: drawnLines - 1) + "\u{1B}[J"
    }

    private func blockLines(_ state: GetSession.Board.State, width: Int) -> [String] {
        let running = state.order.filter { state.running.contains($0) }
        if single {
            guard let id = state.order.first, let progress = state.progress[id] else { return [] }
            return [ProgressRenderer.barLine(progress, name: state.names[id] ?? "", width: width)]
        }
        var rows = running.prefix(MultiProgressRenderer.maxRows).compactMap { id -> String? in
            guard let progress = state.progress[id] else { return nil }
            return ProgressRenderer.barLine(progress, name: state.names[id] ?? "", width: width)
        }
        rows.append(String(totalLine(state).prefix(max(1, width - 1))))
        return rows
    }

    private func totalLine(_ state: GetSession.Board.State) -> String {
        let done = state.outcomes.values.filter { if case .completed = $0 { return true } else { return false } }.count
        let failed = state.outcomes.count - done
        let running = state.order.filter { state.running.contains($0) }
        let bytes = state.order.reduce(Int64(0)) { sum, id in
            if case .completed(let result) = state.outcomes[id] { return sum + result.bytes }
            return sum + (state.progress[id]?.bytesReceived ?? 0)
        }
        let speed = running.reduce(0.0) { $0 + (state.progress[$1]?.bytesPerSecond ?? 0) }
        var line = "Total: \(done)/\(state.order.count) done"
        if failed > 0 { line += ", \(failed) failed" }
        line += ", \(running.count) running, \(Format.bytes(bytes))"
        if speed > 0 { line += " at \(Format.speed(speed))" }
        return line
    }
}

/// Lines for one download's progress.
enum ProgressRenderer {
    /// nil while the download waits to retry: its retry line (``retryLine``) said so, with when.
    static func plainLine(_ progress: DownloadProgress, name: String) -> String? {
        guard progress.waiting == nil else { return nil }
        var line = "\(name): "
        if let fraction = progress.fractionCompleted {
            line += Format.fixed(fraction * 100, decimals: 0) + "% "
            line += "\(Format.bytes(progress.bytesReceived)) of \(Format.bytes(progress.totalBytes ?? 0))"
        } else {
            line += Format.bytes(progress.bytesReceived)
        }
        if progress.bytesPerSecond > 0 { line += " at \(Format.speed(progress.bytesPerSecond))" }
        if let eta = progress.estimatedTimeRemaining { line += ", ETA \(Format.duration(eta))" }
        return line
    }

    /// `retrying in 30 s (the server asked): HTTP 503 …`
    static func waitText(_ waiting: DownloadProgress.RetryWait) -> String {
        let who = waiting.serverAsked ? " (the server asked)" : ""
        return "retrying in \(Format.wait(waiting.delay))\(who): \(waiting.reason.continuingSentence)"
    }

    /// The line announcing a retry: `haul: retrying in 4.0 s (2 of 5): connection refused by 127.0.0.1:1`,
    /// with the file's name when several are downloading.
    static func retryLine(_ retry: DownloadProgress.RetryWait, name: String?) -> String {
        let who = retry.serverAsked ? ", the server asked" : ""
        let file = name.map { "\($0): " } ?? ""
        return
            "haul: \(file)retrying in \(Format.wait(retry.delay)) (\(retry.attempt) of \(retry.maxRetries)\(who)): \(retry.reason.continuingSentence)"
    }

    /// `name ████░░░░  42% 4.2 MiB/10.0 MiB  1.1 MiB/s  ETA 0:05`. Each field after the bar
    /// has a fixed width (the speed and ETA stand as `--` until known), so the bar does not
    /// shrink or jump as they appear and change.
    static func barLine(_ progress: DownloadProgress, name: String, width: Int) -> String {
        func right(_ text: String, _ width: Int) -> String {
            String(repeating: " ", count: max(0, width - text.count)) + text
        }
        var stats = ""
        if let fraction = progress.fractionCompleted {
            let percent = Format.fixed(fraction * 100, decimals: 0)
            stats += String(repeating: " ", count: max(0, 3 - percent.count)) + percent + "% "
        }
        var amount = Format.bytes(progress.bytesReceived)
        if let total = progress.totalBytes { amount += "/\(Format.bytes(total))" }
        // "1023.9 MiB/1023.9 MiB", "1023.9 MiB/s", "ETA 99:59:59".
        stats += right(amount, progress.totalBytes == nil ? 10 : 21)
        stats += "  " + right(progress.bytesPerSecond > 0 ? Format.speed(progress.bytesPerSecond) : "--/s", 12)
        if progress.totalBytes != nil {
            stats += "  ETA " + right(progress.estimatedTimeRemaining.map(Format.duration) ?? "--:--", 8)
        }
        let nameWidth = min(max(8, width / 4), 30)
        if let waiting = progress.waiting {
            // The reason matters more than the bar while nothing arrives.
            let padded = String(name.prefix(nameWidth)).padding(toLength: nameWidth, withPad: " ", startingAt: 0)
            return String("\(padded) \(waitText(waiting))".prefix(max(0, width - 1)))
        }
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
