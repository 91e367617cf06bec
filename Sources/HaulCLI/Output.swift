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

/// Writes to the standard streams without ever trapping.
///
/// Foundation's `FileHandle.write` traps when a write fails — a closed pipe
/// (`haul get --json … | head -1`) or a full device (`2>/dev/full`). Here a failure is a
/// value: a message to stderr that cannot be written is dropped (the download matters more
/// than its commentary), and a closed stdout is reported so the command can stop cleanly.
enum Output {
    /// Ignores SIGPIPE, so a closed pipe becomes EPIPE from `write` instead of killing the
    /// process before it can checkpoint.
    static func ignoreBrokenPipes() {
        signal(SIGPIPE, SIG_IGN)
    }

    /// Writes `text` to stderr; failures are ignored.
    static func error(_ text: String) {
        _ = write(text, to: 2)
    }

    /// Writes `text` to stdout.
    /// - Returns: false when stdout is closed or failing.
    @discardableResult
    static func standard(_ text: String) -> Bool {
        write(text, to: 1)
    }

    private static func write(_ text: String, to descriptor: Int32) -> Bool {
        var text = text
        return text.withUTF8 { bytes in
            var offset = 0
            while offset < bytes.count {
                let n = SystemCall.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
                if n < 0 {
                    if errno == EINTR { continue }
                    return false
                }
                offset += n
            }
            return true
        }
    }
}
