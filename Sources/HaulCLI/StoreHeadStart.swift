import Foundation
import Haul
import Synchronization

/// The store a `haul get` will open, opened while its arguments are parsed.
///
/// Opening the store (creating it, the first time: its image written, synced, renamed) takes
/// about as long as reading `get`'s words, making its requests and starting the event loops,
/// and the two need nothing from each other: the store's path comes from the environment. So
/// ``HaulCommand/start()`` starts the opening on a thread of its own, from the main thread
/// before Swift's cooperative threads exist (they take most of a millisecond to start), and
/// `get` takes the store when it asks for the same path with the same readers, or else drops
/// it and opens its own. The opening's error, if any, is the one `get` would have met itself
/// and is thrown there.
///
/// Nothing is opened for arguments that need no store (`-o -`, help), so those still leave a
/// missing store missing. Arguments that fail to parse may have made a missing store, as the
/// same command with valid ones would; nothing is written to a store by opening it, and a new
/// one is made whole under another name and renamed, so an exit at any point leaves no half.
enum StoreHeadStart {
    private struct Opening {
        let path: String
        let readers: Store.Readers
        let result: Outcome
    }

    /// The opening's result, told once by its thread and awaited by `take`.
    final class Outcome: Sendable {
        private let state = Mutex<(result: Result<Store, any Error>?, waiter: CheckedContinuation<Store, any Error>?)>(
            (nil, nil)
        )

        /// Whether `value` waits for the result (for tests).
        var isAwaited: Bool { state.withLock { $0.waiter != nil } }

        func tell(_ result: Result<Store, any Error>) {
            let waiter = state.withLock { state in
                defer { state.waiter = nil }
                if state.waiter == nil { state.result = result }
                return state.waiter
            }
            waiter?.resume(with: result)
        }

        var value: Store {
            get async throws {
                try await withCheckedThrowingContinuation { continuation in
                    let result = state.withLock { state in
                        if state.result == nil { state.waiter = continuation }
                        return state.result
                    }
                    if let result { continuation.resume(with: result) }
                }
            }
        }
    }

    private static let opening = Mutex<Opening?>(nil)

    /// Starts opening the store at `path` when `arguments` (the command line after `get`)
    /// download to files; nothing otherwise.
    static func begin(for arguments: ArraySlice<String>, path: String) {
        guard let readers = readers(for: arguments) else { return }
        // On a thread of its own, started now (not from a task, which would wait for the
        // cooperative threads): opening blocks (a file lock, a new store's sync), and NIO's
        // file pool is not started yet: `get` sizes it for its connections first.
        let result = Outcome()
        opening.withLock { $0 = Opening(path: path, readers: readers, result: result) }
        Thread.detachNewThread {
            result.tell(Result { try Store(path: path, readers: readers) })
        }
    }

    /// The store opened ahead for `path` with `readers` (or the error opening it met); nil when
    /// none was, or one was for another path or other readers (that one is closed when its
    /// opening ends: nothing holds it then).
    static func take(path: String, readers: Store.Readers) async throws -> Store? {
        guard let started = opening.withLock({ $0.take() }), started.path == path, started.readers == readers else {
            return nil
        }
        return try await started.result.value
    }

    /// How `get` will read its store for `arguments`, as far as the words tell without parsing
    /// them (a wrong guess costs only the opening ahead): one connection for one URL and no
    /// list; nil when the command opens no store (`-o -`, `--help`, …).
    static func readers(for arguments: ArraySlice<String>) -> Store.Readers? {
        var urls = 0
        var list = false
        var options = true
        for argument in arguments {
            if !options || argument == "--" {
                // After `--` every word is a URL.
                if options { options = false } else if argument.contains("://") { urls += 1 }
                continue
            }
            switch argument {
            case "-", "-o-", "--output=-", "-h", "--help", "-help", "--version", "--experimental-dump-help":
                return nil
            case "-i", "-M", "--input-file", "--metalink":
                list = true
            default:
                if argument.hasPrefix("--input-file=") || argument.hasPrefix("--metalink=") { list = true }
                if !argument.hasPrefix("-"), argument.contains("://") { urls += 1 }
            }
        }
        return urls == 1 && !list ? .serial : .concurrent
    }
}
