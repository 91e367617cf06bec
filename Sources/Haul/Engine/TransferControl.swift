import Synchronization

/// Why a running transfer was asked to stop.
enum StopReason: Sendable, Equatable {
    /// The user paused it: it keeps its data and waits to be resumed.
    case pause
    /// The scheduler took its slot (a lower limit, or shutdown): it keeps its data and queues again.
    case yield
    /// The user cancelled it: its data goes.
    case cancel
}

/// The switch that stops a transfer. The first request wins; ``waitForStop()`` returns
/// once there is one, so whoever runs the transfer can cancel it and let it conclude.
final class TransferControl: Sendable {
    private let reason = Mutex<StopReason?>(nil)
    private let signal: AsyncStream<Void>
    private let signalSink: AsyncStream<Void>.Continuation

    init() {
        (signal, signalSink) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    func request(_ stop: StopReason) {
        let first = reason.withLock { reason -> Bool in
            guard reason == nil else { return false }
            reason = stop
            return true
        }
        if first {
            signalSink.yield()
            signalSink.finish()
        }
    }

    var requested: StopReason? { reason.withLock { $0 } }

    /// Returns when a stop is requested, or when the calling task is cancelled.
    func waitForStop() async {
        for await _ in signal { return }
    }
}
