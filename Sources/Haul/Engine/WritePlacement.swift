import NIOCore
import Synchronization

/// Where a response's bytes are read: the event loop that reads its connection, and the
/// pipe they wait in (``BodyPipe``).
struct ReadSite: Sendable {
    let loop: any EventLoop
    let pipe: BodyPipe

    /// The loop as a task executor, for the task that consumes the body.
    var executor: LoopExecutor { LoopExecutor(loop) }
}

/// An event loop as a task executor: a task that prefers it runs its jobs on the loop's thread
/// (Swift's cooperative threads otherwise). The task that consumes a response's body runs on
/// the loop that reads it, so waking it for a batch, and again after a write on the loop, is a
/// job queued on that thread, not a wake-up of another.
final class LoopExecutor: TaskExecutor {
    let loop: any EventLoop

    init(_ loop: any EventLoop) {
        self.loop = loop
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        loop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }
}

/// Decides where a batch of received bytes is written: on the event loop that read them, or
/// on ``FileIO``'s threads.
///
/// A byte just read from a socket sits in the cache of the core whose loop read it. Written
/// from a pool thread on the other core, every cache line of it crosses between the cores
/// first: measured on a 2-core machine at 125 MiB/s, a third of a download's CPU (0.4 s of
/// 1.2 s per GiB). Written on the loop that read it, it is copied into the page cache from
/// where it already is, as curl and aria2 do. So a batch goes to its loop when that costs
/// the loop little:
/// - the part file is on a local disk (``PartFile/isOnLocalDisk``): the page cache takes the
///   write at memory speed, where a network or FUSE file system answers at its own; and it
///   is not being synced (a checkpoint's `fdatasync`), which a write may wait for;
/// - writing is a small part of the connection's time (``Pace``) and the loop is not waiting
///   for the writer (its pipe is below its bound): when the connection is as fast as the
///   writes, the loop reads on while the pool writes, on two cores;
/// - no write on a loop took ``slow`` lately: the kernel throttles writers to the disk's pace
///   once too much waits for it, and a throttled write would stall every connection of its
///   loop. Writes then go to the pool for ``cooldown(after:)``, a hundred times as long as
///   the slow write took: a loop spends at most about 1 % of its time held up by the disk,
///   and one hiccup (a 30 ms write in a gibibyte) does not send a whole download to the pool.
package final class WritePlacement: Sendable {
    /// A write on a loop that takes this long sends writes to the pool for a while.
    static let slow = Duration.milliseconds(10)
    /// The longest the pool keeps the writes after one slow write.
    static let longestCooldown = Duration.seconds(60)

    /// How long writes go to the pool after a write on a loop took `took` (at least ``slow``).
    static func cooldown(after took: Duration) -> Duration {
        min(took * 100, longestCooldown)
    }

    /// How much of a connection's time its writes take: busy when, over the last ``span``
    /// or more, the writes themselves (their system calls, on whichever thread) took more
    /// than a quarter of it.
    ///
    /// Measured over a span, not from one write to the next: a server that paces its sends
    /// (nginx's `limit_rate`) sends in bursts, and two batches of one burst are written back
    /// to back, which a single interval reads as a writer that never rests. Measured inside
    /// the write, not around it: a write on the pool also took a hop to another thread and
    /// back, which would keep a connection on the pool for having been sent there.
    struct Pace {
        static let span = Duration.milliseconds(100)
        /// Where the span being measured began (at the first write's start).
        private var spanStart: Duration?
        private var writing = Duration.zero
        private(set) var isBusy = false

        /// A write that took `took` and ended at `end`.
        mutating func wrote(taking took: Duration, endingAt end: Duration) {
            let start = spanStart ?? end - took
            writing += took
            guard end - start >= Pace.span else {
                spanStart = start
                return
            }
            isBusy = writing * 4 > end - start
            (spanStart, writing) = (end, .zero)
        }
    }

    private struct State {
        /// Until when (on the timeline) writes go to the pool after a slow one.
        var poolUntil: Duration?
        var onLoop = 0
        var onPool = 0
    }

    private let timeline: Timeline
    private let state = Mutex(State())

    package init(timeline: Timeline = Timeline()) {
        self.timeline = timeline
    }

    /// How many batches were written on a loop, and how many on the pool.
    package var writes: (onLoop: Int, onPool: Int) { state.withLock { ($0.onLoop, $0.onPool) } }

    /// The time writes are measured by.
    var now: Duration { timeline.now }

    /// The loop to write a batch read at `site` into `part` on now, given the connection's
    /// `pace`; nil: the pool.
    func loop(for site: ReadSite?, part: PartFile, pace: Pace) -> (any EventLoop)? {
        let loop = site.flatMap { site -> (any EventLoop)? in
            guard part.isOnLocalDisk, !part.isSyncing, !pace.isBusy, !site.pipe.isFull else { return nil }
            return site.loop
        }
        let now = timeline.now
        return state.withLock { state in
            if let until = state.poolUntil, now < until {
                state.onPool += 1
                return nil
            }
            state.poolUntil = nil
            if loop == nil { state.onPool += 1 } else { state.onLoop += 1 }
            return loop
        }
    }

    /// Runs `write` on `loop`, or on ``FileIO``'s threads when it is nil, and returns how long
    /// the write itself took: a slow one on a loop sends the writes after it to the pool.
    func write(on loop: (any EventLoop)?, _ write: @escaping @Sendable () throws -> Void) async throws -> Duration {
        let timeline = timeline
        let timed: @Sendable () throws -> Duration = {
            let start = timeline.now
            try write()
            return timeline.now - start
        }
        guard let loop else { return try await FileIO.run(timed) }
        try Task.checkCancellation()
        let took = try await loop.submit(timed).get()
        if took >= WritePlacement.slow {
            let until = timeline.now + WritePlacement.cooldown(after: took)
            state.withLock { $0.poolUntil = max($0.poolUntil ?? until, until) }
        }
        return took
    }
}
