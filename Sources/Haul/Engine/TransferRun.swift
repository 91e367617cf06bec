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
    /// The transfer races the stop switch: when a stop is requested (or the calling task is
    /// cancelled), the transfer is cancelled and concludes by the stop's reason (a paused
    /// task keeps its data and returns resume data; a cancelled one deletes it).
    func execute(
        _ task: TaskRecord,
        segments: [SegmentRecord],
        environment: TransferEnvironment
    ) async -> Result<DownloadResult, HaulError> {
        let (control, progress, limiter) = (control, progress, limiter)
        return await withTaskGroup(of: Result<DownloadResult, HaulError>?.self) { group in
            group.addTask {
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
                    return .success(result)
                } catch {
                    return .failure(error as? HaulError ?? HaulError(.connection, "\(error)"))
                }
            }
            group.addTask {
                await control.waitForStop()
                return nil
            }
            var result: Result<DownloadResult, HaulError>?
            while let next = await group.next() {
                // A stop request (nil) or the end of the transfer: either way stop the other.
                group.cancelAll()
                if let next { result = next }
            }
            return result ?? .failure(HaulError(.cancelled, "Stopped"))
        }
    }
}
