import Foundation

/// A running download: its progress, a way to pause or cancel it, and its result.
///
/// It runs from ``Downloader/download(_:)`` on, whether anyone awaits ``result()`` or not
/// (as a URLSession task does once resumed). The task that awaits ``result()`` owns it:
/// cancelling that task pauses the download — its data kept, ``result()`` throwing
/// ``HaulError/Code/paused`` with resume data — so the caller's cancellation reaches the
/// transfer and nothing runs on unseen.
public final class DownloadTask: Sendable {
    /// The task's identifier in the store.
    public let id: UUID
    private let handles: TransferHandles
    private let runner: Task<DownloadResult, any Error>

    init(
        id: UUID,
        rateLimit: Int64?,
        clock: any Clock<Duration> = ContinuousClock(),
        operation: @escaping @Sendable (TransferHandles) async throws -> DownloadResult
    ) {
        self.id = id
        let handles = TransferHandles(rateLimit: rateLimit, clock: clock)
        self.handles = handles
        self.runner = Task { try await operation(handles) }
    }

    /// This download's own rate limit.
    var limiter: RateLimiter { handles.limiter }

    /// Changes this download's rate limit (bytes per second; nil for none) while it runs.
    public func setRateLimit(_ bytesPerSecond: Int64?) {
        handles.limiter.setRate(bytesPerSecond)
    }

    /// Progress now: bytes, total, speed over the last second or more.
    public var progress: DownloadProgress { handles.progress.snapshot() }

    /// Waits for the download to end. Cancelling the task that waits pauses the download.
    /// - Returns: the finished file.
    /// - Throws: ``HaulError``; a pause ends it with code ``HaulError/Code/paused`` and resume data.
    public func result() async throws -> DownloadResult {
        let (runner, control) = (runner, handles.control)
        return try await withTaskCancellationHandler {
            try await runner.value
        } onCancel: {
            control.request(.pause)
        }
    }

    /// Stops the download after a last checkpoint and returns what is needed to continue it.
    /// - Throws: ``HaulError`` when the download had already ended, or ended with a failure first.
    public func pause() async throws -> ResumeData {
        handles.control.request(.pause)
        do {
            let result = try await runner.value
            throw HaulError(
                .invalidArgument,
                "The download had already finished: \(result.path)",
                path: result.path
            )
        } catch let error as HaulError where error.code == .paused {
            guard let resumeData = error.resumeData else { throw error }
            return resumeData
        }
    }

    /// Stops the download and deletes its partial data.
    public func cancel() async {
        handles.control.request(.cancel)
        _ = try? await runner.value
    }
}
