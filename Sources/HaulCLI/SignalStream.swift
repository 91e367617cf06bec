import Dispatch
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Turns process signals into an AsyncStream, so a command can checkpoint and pause on
/// Ctrl-C. After the first signal the default action is restored: a second Ctrl-C exits at
/// once (the data is still safe up to the last checkpoint).
enum SignalStream {
    /// The first signal received, shared between the watcher and the command.
    final class Received: Sendable {
        private let value = Mutex<Int32?>(nil)

        func record(_ signal: Int32) { value.withLock { if $0 == nil { $0 = signal } } }
        var signal: Int32? { value.withLock { $0 } }
    }

    static func watch(_ signals: [Int32]) -> AsyncStream<Int32> {
        AsyncStream { continuation in
            // Dispatch sources are thread-safe; they live until the stream ends.
            nonisolated(unsafe) let sources = signals.map { number -> any DispatchSourceSignal in
                signal(number, SIG_IGN)
                let source = DispatchSource.makeSignalSource(signal: number, queue: .global())
                source.setEventHandler {
                    for other in signals { signal(other, SIG_DFL) }
                    continuation.yield(number)
                }
                source.resume()
                return source
            }
            continuation.onTermination = { _ in
                for source in sources { source.cancel() }
            }
        }
    }
}
