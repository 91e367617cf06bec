import Foundation
import Haul
import HaulWire
import Hummingbird
import Metrics
import NIOCore
import Prometheus

/// `GET /metrics`: the daemon's metrics in Prometheus's text format — what the engine reports
/// through swift-metrics (bytes received, running connections, retries and failures by error
/// class, fsync, checkpoint and queue-wait durations) and, measured at each scrape, the
/// downloads in each state and the overall speed.
struct MetricsRoutes {
    let core: DaemonCore
    let registry: PrometheusCollectorRegistry

    func register(on router: Router<APIContext>) {
        router.get("/metrics") { _, _ in
            let counts = try await core.stateCounts()
            for state in TaskState.allCases {
                registry.makeGauge(name: "haul_downloads", labels: [("state", state.rawValue)])
                    .set(Double(counts[state.rawValue] ?? 0))
            }
            let overall = await core.manager.overallProgress()
            registry.makeGauge(name: "haul_download_speed_bytes").set(overall.bytesPerSecond)
            if let fleet = core.sessionStore as? any FleetView { try await fleetNodes(fleet) }
            var buffer: [UInt8] = []
            registry.emit(into: &buffer)
            return Response(
                status: .ok,
                headers: [.contentType: "text/plain; version=0.0.4; charset=utf-8"],
                body: .init(byteBuffer: ByteBuffer(bytes: buffer))
            )
        }
    }
}

extension MetricsRoutes {
    /// In a fleet, each node as the store has it at the scrape, labelled by its name: its
    /// state (1 for the one it is in), leases, own limit, speed and heartbeat's age — the
    /// same on every node's `/metrics`, so one scrape shows the fleet.
    private func fleetNodes(_ fleet: any FleetView) async throws {
        let lease = fleet.leaseDuration.components
        let leaseSeconds = Double(lease.seconds) + Double(lease.attoseconds) / 1e18
        let now = Date()
        for node in try await fleet.fleetNodes() {
            let name = ("node", node.name)
            let state = node.state(at: now, leaseSeconds: leaseSeconds)
            for one in API.Status.Fleet.Node.states {
                registry.makeGauge(name: "haul_fleet_node_state", labels: [name, ("state", one)])
                    .set(one == state ? 1.0 : 0.0)
            }
            registry.makeGauge(name: "haul_fleet_node_leases", labels: [name]).set(Double(node.leases))
            registry.makeGauge(name: "haul_fleet_node_capacity", labels: [name])
                .set(Double(node.maxConcurrentDownloads ?? 0))
            registry.makeGauge(name: "haul_fleet_node_speed_bytes", labels: [name]).set(node.bytesPerSecond)
            registry.makeGauge(name: "haul_fleet_node_heartbeat_age_seconds", labels: [name])
                .set(max(0, now.timeIntervalSince(node.heartbeatAt)))
        }
    }
}

/// The Prometheus registry a daemon program reports into: `MetricsSystem` bootstrapped with
/// it once per process (a program may bootstrap only once; a host that chose another backend
/// passes no registry, and `/metrics` is not served).
public enum DaemonMetrics {
    public static let registry = PrometheusCollectorRegistry()

    private static let bootstrapped: Void = {
        MetricsSystem.bootstrap(PrometheusMetricsFactory(registry: registry))
    }()

    /// Sends swift-metrics to ``registry``; later calls do nothing.
    public static func bootstrap() {
        _ = bootstrapped
    }
}
