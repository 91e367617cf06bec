import Dispatch
import HaulCLI

/// The `haul` executable: everything is in HaulCLI.
///
/// `main` is synchronous and waits for the command on a semaphore. An `async` main ends its
/// thread in `dispatch_main()`, whose `pthread_exit` unwinds the main thread's stack: glibc
/// loads libgcc_s for it, and the unwinder's lookups fault in about a megabyte of the binary's
/// unwind tables, resident for the rest of the run. Nothing in Haul runs on the main queue or
/// the main actor, so the main thread has nothing else to do; the command runs detached, on
/// Swift's global executor, as an `async` main's would after `dispatch_main()`.
@main
enum HaulMain {
    static func main() {
        let words = HaulCommand.start()
        let finished = DispatchSemaphore(value: 0)
        Task.detached {
            await HaulCommand.runMain(words)
            finished.signal()
        }
        finished.wait()
    }
}
