import Foundation

/// One attempt's connections over a plan (``SegmentWorker``), with the checkpoints beside
/// them (``Checkpointer``; none for a run with little to write, ``Checkpointer/watchesRun``)
/// and, with piece hashes, each piece checked as it completes. Each
/// connection holds its host's share (``HostConnections``) while it runs. Whichever ends
/// first — the connections (done, or failed), or the checkpointer, which ends only by
/// failing (the store refuses a checkpoint) — stops the other: connections do not fetch what
/// can no longer be recorded.
struct ConnectionRun {
    let worker: SegmentWorker
    let checkpointer: Checkpointer
    let pieces: PieceVerifier?
    let share: HostConnections.Share?

    /// Runs the connection carrying `first` (its response holds a connection already) and
    /// `extra` more. On an error, the last checkpoint is made before the error is thrown; on
    /// success, it is the caller's (the file's completion may make it with its own sync).
    func run(first: SegmentResponse?, extra: Int) async throws {
        let (worker, checkpointer, pieces, share) = (worker, checkpointer, pieces, share)
        do {
            if pieces == nil, !checkpointer.watchesRun {
                // Little to write: no checkpointer beside the connections.
                try await Self.runWorkers(worker, first: first, extra: extra, share: share)
                return
            }
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await checkpointer.run() }
                group.addTask {
                    guard let pieces else {
                        try await Self.runWorkers(worker, first: first, extra: extra, share: share)
                        return
                    }
                    try await withThrowingDiscardingTaskGroup { tasks in
                        // Pieces are checked beside the connections, as they complete; the
                        // checker ends with the last of them, once it has checked what they wrote.
                        tasks.addTask { try await worker.checkPieces(pieces) }
                        tasks.addTask {
                            try await Self.runWorkers(worker, first: first, extra: extra, share: share)
                            pieces.close()
                        }
                    }
                }
                try await group.next()
                group.cancelAll()
                try await group.waitForAll()
            }
        } catch {
            try? await checkpointer.checkpoint()
            throw error
        }
    }

    /// The download's connections: the one carrying `first` (its response holds a
    /// connection already) and `extra` more, each while its host's `share` grants it.
    private static func runWorkers(
        _ worker: SegmentWorker,
        first: SegmentResponse?,
        extra: Int,
        share: HostConnections.Share?
    ) async throws {
        if let first, extra == 0 {
            // One connection: it runs in this task, not in a group of one.
            guard let share else {
                _ = try await worker.run(first: first)
                return
            }
            share.hold()
            try await share.connection(alreadyHeld: true) { try await worker.run(first: $0 == 0 ? first : nil) }
            return
        }
        try await withThrowingDiscardingTaskGroup { workers in
            if let first {
                share?.hold()
                workers.addTask {
                    guard let share else {
                        _ = try await worker.run(first: first)
                        return
                    }
                    try await share.connection(alreadyHeld: true) { try await worker.run(first: $0 == 0 ? first : nil) }
                }
            }
            for _ in 0..<extra {
                workers.addTask {
                    guard let share else {
                        _ = try await worker.run(first: nil)
                        return
                    }
                    try await share.connection { _ in try await worker.run(first: nil) }
                }
            }
        }
    }
}
