import CHaulSystem
import Foundation

/// How a Haul program uses the C library's allocator.
package enum ProcessMemory {
    /// Freed memory kept for reuse at the top of each allocator heap (glibc's trim threshold).
    static let retained = 64 << 20

    /// Keeps freed memory for reuse instead of returning it to the system at once. A program
    /// that moves many files allocates and frees the buffers of every response; with glibc's
    /// default (128 KiB, raised only by large blocks) each heap shrinks and grows again
    /// hundreds of times a second, and every page taken back is a fresh page to fault in
    /// and zero — on a virtual machine whose host reclaimed it, far slower still. Measured on
    /// 200 files of 1 MiB, 16 at a time: 6,000–14,000 page faults and a third of runs 0.6 s
    /// instead of 0.35 s by default; 4,500 and no slow run with this.
    ///
    /// For the `haul` program only: a library does not set its host's allocator.
    package static func retainFreedMemory() {
        chaul_retain_freed_memory(retained)
    }

    /// At most one allocator arena per core (at least two; glibc makes up to eight a core),
    /// each keeping what its threads freed. For the daemon, at its start.
    package static func limitArenas() {
        chaul_limit_arenas(Int32(clamping: max(2, ProcessInfo.processInfo.activeProcessorCount)))
    }

    /// The trim, once asking has stopped for half a second, on the file threads (it takes each
    /// arena's lock in turn).
    private static let trim = QuietSpell(quiet: .milliseconds(500)) {
        try? await FileIO.run { chaul_return_freed_memory() }
    }

    /// After work that allocated much at once (thousands of downloads added): gives the free
    /// pages of every arena back to the system, past what ``retainFreedMemory()`` keeps, once
    /// nothing more has asked for half a second (``QuietSpell``): a list of a million added in
    /// batches is trimmed once at its end, not after every batch (each trim's pages faulted in
    /// again by the next batch: 4 % of the add's CPU). Measured on 100,000 downloads added in
    /// batches to a daemon whose live heap was about 30 MB: 195 MB anonymous memory held after,
    /// 98 MB trimmed, 57 MB trimmed with an arena a core.
    package static func returnFreedMemory() {
        trim.ask()
    }
}
