import Foundation
import HaulPostgres
import HaulTesting
import Synchronization

@testable import Haul

/// What tests of the manager share: its configuration for a store, and a recorder of the
/// order tasks reach a state in.
package enum ManagerFixtures {
    package static func configuration(
        _ location: Downloader.StoreLocation,
        limit: Int,
        perHost: Int = 100
    ) -> DownloadManager.Configuration {
        var downloader = testConfiguration(store: "")
        downloader.store = location
        if case .existing(let store) = location.kind, store is PostgresStore {
            // A checkpoint is a transaction across a socket: at the tests' 50 ms, five
            // downloads make a hundred a second, which a loaded machine's server falls behind.
            downloader.checkpointInterval = .milliseconds(250)
        }
        return DownloadManager.Configuration(
            downloader: downloader,
            maxConcurrentDownloads: limit,
            maxDownloadsPerHost: perHost
        )
    }

    /// Collects the order in which tasks entered `state`.
    package struct Recorder {
        package final class IDList: Sendable {
            private let ids = Mutex<[UUID]>([])
            package func append(_ id: UUID) { ids.withLock { $0.append(id) } }
            package var all: [UUID] { ids.withLock { $0 } }
        }

        package let list = IDList()
        package let task: Task<Void, Never>

        package init(_ events: DownloadEvents, state: TaskState) {
            let list = self.list
            task = Task {
                for await event in events {
                    if case .stateChanged(let id, _, let to, _) = event, to == state { list.append(id) }
                }
            }
        }

        package var ids: [UUID] { list.all }

        /// Waits until `id` is among those told; false after 20 s.
        package func waitUntilTold(_ id: UUID) async throws -> Bool {
            let list = self.list
            return try await waitUntil { list.all.contains(id) }
        }
    }
}
