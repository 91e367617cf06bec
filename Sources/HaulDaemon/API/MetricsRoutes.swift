import Foundation
import Haul
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
