import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// A diagnostic for a loaded test run: with `HAUL_TEST_STALLS` naming a directory, a thread of
/// its own watches Swift's cooperative pool and NIO's shared event loops, each of which must
/// answer every 100 ms; when one has not answered for 3 s it writes every thread's stack
/// (gdb's) into that directory, to show what holds the pool or a loop. Off unless asked.
package enum StallWatch {
    /// Starts the watch once per process, when asked.
    package static func startIfAsked() { _ = started }

    private static let started: Void = {
        guard let directory = ProcessInfo.processInfo.environment["HAUL_TEST_STALLS"], !directory.isEmpty else {
            return
        }
        let beats = Beats(loops: MultiThreadedEventLoopGroup.singleton.makeIterator().map { $0 })
        beats.start()
        Thread { watch(beats, into: directory) }.start()
    }()

    /// The time each watched executor last ran a beat.
    private final class Beats: Sendable {
        let loops: [any EventLoop]
        let pool = Atomic<UInt64>(DispatchTime.now().uptimeNanoseconds)
        let loopBeats: Mutex<[UInt64]>

        init(loops: [any EventLoop]) {
            self.loops = loops
            self.loopBeats = Mutex(Array(repeating: DispatchTime.now().uptimeNanoseconds, count: loops.count))
        }

        func start() {
            Task.detached {
                while true {
                    self.pool.store(DispatchTime.now().uptimeNanoseconds, ordering: .relaxed)
                    try? await Task.sleep(for: .milliseconds(100))
                }
            }
            for (index, loop) in loops.enumerated() {
                loop.scheduleRepeatedTask(initialDelay: .zero, delay: .milliseconds(100)) { _ in
                    let now = DispatchTime.now().uptimeNanoseconds
                    self.loopBeats.withLock { $0[index] = now }
                }
            }
        }

        /// The names of those silent for more than `limit` nanoseconds.
        func silent(longerThan limit: UInt64) -> [String] {
            let now = DispatchTime.now().uptimeNanoseconds
            var names: [String] = []
            if now &- pool.load(ordering: .relaxed) > limit { names.append("cooperative pool") }
            for (index, beat) in loopBeats.withLock({ $0 }).enumerated() where now &- beat > limit {
                names.append("event loop \(index)")
            }
            return names
        }
    }

    private static func watch(_ beats: Beats, into directory: String) {
        var count = 0
        var reported = false
        while true {
            Thread.sleep(forTimeInterval: 0.5)
            let silent = beats.silent(longerThan: 3_000_000_000)
            if silent.isEmpty {
                reported = false
                continue
            }
            guard !reported else { continue }
            reported = true
            count += 1
            let path = (directory as NSString).appendingPathComponent("stall-\(getpid())-\(count).txt")
            let header = "\(Date()): silent for over 3 s: \(silent.joined(separator: ", "))\n"
            FileManager.default.createFile(atPath: path, contents: Data(header.utf8))
            guard let output = FileHandle(forWritingAtPath: path) else { continue }
            output.seekToEndOfFile()
            let gdb = Process()
            gdb.executableURL = URL(fileURLWithPath: "/usr/bin/gdb")
            gdb.arguments = ["-p", "\(getpid())", "-batch", "-nx", "-ex", "thread apply all bt 40"]
            gdb.standardOutput = output
            gdb.standardError = FileHandle.nullDevice
            try? gdb.run()
            gdb.waitUntilExit()
            try? output.close()
        }
    }
}
