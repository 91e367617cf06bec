/// What whoever runs a transfer holds to steer and watch it: the stop switch, the live
/// progress, and the download's own rate limit.
struct TransferHandles: Sendable {
    var control = TransferControl()
    var progress: ProgressBox
    var limiter: RateLimiter

    /// Handles whose rate limit and speed meter run on `clock`.
    init(rateLimit: Int64? = nil, clock: any Clock<Duration> = ContinuousClock()) {
        limiter = RateLimiter(bytesPerSecond: rateLimit, clock: clock)
        progress = ProgressBox(timeline: Timeline(clock))
    }
}

extension TransferHandles {
    /// Runs one download to its end — the one execution path of every download, a
    /// ``DownloadManager``'s and a single ``DownloadTask``'s alike.
    ///
    /// The transfer runs in a task of its own, which the first stop request (or the calling
    /// task's cancellation) cancels; it concludes by the stop's reason (a paused task keeps
    /// its data and returns resume data; a cancelled one deletes it). The switch cancels the
    /// task itself: no second task waits beside it for a request.
    func execute(
        _ task: TaskRecord,
        segments: [SegmentRecord],
        environment: TransferEnvironment
    ) async -> Result<DownloadResult, HaulError> {
        let (control, progress, limiter) = (control, progress, limiter)
        let run = Task {
            let transfer = Transfer(
                task: task,
                segments: segments,
                environment: environment,
                progress: progress,
                control: control,
                limiter: limiter
            )
            do {
                let result = try await transfer.run()
                control.conclude()  // Completed: a stop asked from now on is too late.
                return Result<DownloadResult, HaulError>.success(result)
            } catch {
                return .failure(error as? HaulError ?? HaulError(.connection, "\(error)"))
            }
        }
        control.whenStopped { run.cancel() }
        return await withTaskCancellationHandler {
            await run.value
        } onCancel: {
            run.cancel()
        }
    }
}
