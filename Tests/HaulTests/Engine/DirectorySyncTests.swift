import Dispatch
import Foundation
import HaulTestSupport
import Synchronization
import Testing

@testable import Haul

/// Renames into one directory share its syncs (group commit), and no rename is called
/// durable by a sync that began before it was asked for.
@Suite(.timeLimit(.minutes(10))) struct DirectorySyncTests {
    /// A stand-in for `fsync` that counts the syncs and holds the first until released.
    private final class Syncs: Sendable {
        let made = Mutex<[String]>([])
        let releaseFirst = DispatchSemaphore(value: 0)

        func sync(_ path: String) {
            let index = made.withLock { made in
                made.append(path)
                return made.count
            }
            if index == 1 { releaseFirst.wait() }
        }
    }

    @Test(
        "callers that ask during a sync wait for the next one, which covers them all; another directory is not held up"
    )
    func groupCommit() async throws {
        let syncs = Syncs()
        let directorySync = DirectorySync(syncing: syncs.sync)
        // Callers block (they run on FileIO's threads in Haul): here each on a thread of its own.
        let returned = Mutex<[String]>([])
        func call(_ path: String) {
            Thread {
                directorySync.sync(path)
                returned.withLock { $0.append(path) }
            }.start()
        }

        call("/d")
        // The first sync of /d has begun, and is held.
        #expect(try await waitUntil { syncs.made.withLock { $0.count } == 1 })
        for _ in 0..<5 { call("/d") }
        // Their requests are in, after the first sync began: it must not answer them.
        #expect(try await waitUntil { directorySync.outstanding("/d") == 6 })
        // Another directory's sync goes on meanwhile.
        call("/e")
        #expect(try await waitUntil { returned.withLock { $0 } == ["/e"] }, "a sync of /e waited for /d's")

        syncs.releaseFirst.signal()
        #expect(try await waitUntil { returned.withLock { $0.count } == 7 })
        // The first sync, one more for the five that asked during it, and /e's.
        #expect(syncs.made.withLock { $0 }.sorted() == ["/d", "/d", "/e"])
        #expect(directorySync.directoriesInUse == 0)
    }

    @Test("callers one after another each get a sync of their own")
    func sequentialCallersEachSync() {
        let syncs = Syncs()
        syncs.releaseFirst.signal()  // nothing is held
        let directorySync = DirectorySync(syncing: syncs.sync)
        for _ in 0..<3 { directorySync.sync("/d") }
        #expect(syncs.made.withLock { $0 } == ["/d", "/d", "/d"])
        #expect(directorySync.directoriesInUse == 0)
    }
}
