import Foundation
import Haul
import HaulWire
import Logging
import Synchronization

/// `haul daemon drain`: a fleet's node taken out of service without a download failing or
/// starting again from zero — for an upgrade, node by node. Asked through any node (the
/// store marks it, and the node hears of it at once), the node takes no new lease; it hands
/// back what it runs at a checkpoint (or, asked to finish, lets it finish first), so that
/// another node continues each download with a ranged request; then it stops, as
/// `haul daemon stop` does, and leaves the fleet.
package final class NodeDrain: Sendable {
    private let begun = Mutex(false)

    /// A drain asked of a daemon that is not in a fleet.
    package static let notInFleet = HaulError(
        .invalidArgument,
        "This daemon is not in a fleet: there is no node to drain",
        hint: "Stop it with haul daemon stop (its downloads continue at its next start)"
    )

    /// Asks node `node` (nil: this daemon's) to drain.
    /// - Throws: ``HaulError/Code/invalidArgument`` when the daemon is not in a fleet;
    ///   ``HaulError/Code/notFound`` for a node not running in it.
    func request(_ node: String?, finishing: Bool, core: DaemonCore) async throws -> API.Drain {
        guard let fleet = core.sessionStore as? any FleetView else { throw Self.notInFleet }
        if let node { try DownloadRequest.validateNodeName(node) }
        let node = node ?? fleet.node
        try await fleet.requestDrain(of: node, finishing: finishing)
        if node == fleet.node { begin(finishing: finishing, fleet: fleet, core: core) }
        return API.Drain(node: node, finishing: finishing)
    }

    /// The store says a drain was asked of some node (or signals may have been missed):
    /// if of this one, it begins.
    func heard(core: DaemonCore) async {
        guard let fleet = core.sessionStore as? any FleetView, !begun.withLock({ $0 }) else { return }
        do {
            guard let finishing = try await fleet.drainRequest() else { return }
            begin(finishing: finishing, fleet: fleet, core: core)
        } catch {
            core.logger.warning("cannot read whether this node is to drain", metadata: ["error": "\(error)"])
        }
    }

    /// Whether this node drains.
    var isDraining: Bool { begun.withLock { $0 } }

    /// Drains this node, once: no new lease from now; its downloads finish first when
    /// `finishing`; then the daemon stops, handing back at a checkpoint what still runs.
    private func begin(finishing: Bool, fleet: any FleetView, core: DaemonCore) {
        guard
            !begun.withLock({ begun in
                defer { begun = true }
                return begun
            })
        else { return }
        fleet.stopTakingWork()
        core.logger.notice(
            finishing
                ? "draining: taking no new download, letting those running finish, then stopping"
                : "draining: taking no new download, handing those running back at a checkpoint, then stopping",
            metadata: ["node": "\(fleet.node)"]
        )
        Task {
            if finishing { await Self.nothingRuns(core.manager) }
            await core.requestShutdown()
        }
    }

    /// Returns once no download runs here (asked again after the events of each moment; they
    /// end when the manager stops).
    private static func nothingRuns(_ manager: DownloadManager) async {
        let events = manager.events()
        while await !manager.runningTaskIDs.isEmpty {
            guard await events.nextBatch() != nil else { return }
        }
    }
}
