import Foundation
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// Which networks downloads may use: the seeds' "allow cellular", Apple's
/// `allowsExpensiveNetworkAccess`. An interface is metered when its name matches one of
/// ``meteredInterfaces`` (shell patterns: `wwan*`, `ppp*`); a download whose route goes out
/// of a metered interface waits for the network unless both the policy and the download
/// allow metered networks.
public struct NetworkPolicy: Sendable, Equatable, Codable {
    /// Whether any download may use a metered interface.
    public var allowsMetered: Bool
    /// Interface name patterns that are metered (`fnmatch`): mobile broadband and
    /// point-to-point links by default.
    public var meteredInterfaces: [String]

    public init(allowsMetered: Bool = true, meteredInterfaces: [String] = NetworkPolicy.defaultMetered) {
        self.allowsMetered = allowsMetered
        self.meteredInterfaces = meteredInterfaces
    }

    /// `wwan*` and `ppp*`.
    public static let defaultMetered = ["wwan*", "ppp*"]

    /// Whether `interface` is metered.
    public func isMetered(_ interface: String) -> Bool {
        meteredInterfaces.contains { fnmatch($0, interface, 0) == 0 }
    }

    /// Checks the patterns: 1 to 64 of them, each 1 to 64 characters of a name or a pattern.
    /// - Throws: ``HaulError/Code/invalidArgument`` naming the pattern.
    public func validate() throws {
        guard meteredInterfaces.count <= 64 else {
            throw HaulError(.invalidArgument, "meteredInterfaces holds more than 64 patterns")
        }
        for pattern in meteredInterfaces {
            guard (1...64).contains(pattern.count),
                pattern.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "*?[]!-_.:@".contains($0)) })
            else {
                throw HaulError(
                    .invalidArgument,
                    "The interface pattern '\(pattern.prefix(64))' is not a name or a shell pattern",
                    hint: "Use names and patterns such as wwan0, wwan*, ppp*"
                )
            }
        }
    }

    /// Why a download cannot use its route now, or nil when it can. `meteredBySystem`
    /// names the interfaces the system (NetworkManager) says are metered.
    func block(
        for route: NetworkMonitor.Route?,
        allowsMetered taskAllows: Bool,
        meteredBySystem: Set<String>
    ) -> NetworkBlock? {
        guard let route, route.isUsable else { return .noRoute }
        let metered = isMetered(route.interface) || meteredBySystem.contains(route.interface)
        if metered, !(allowsMetered && taskAllows) { return .metered(route.interface) }
        return nil
    }
}

/// Why a download waits for the network.
enum NetworkBlock: Sendable, Equatable {
    /// No route, or one over an interface that is down.
    case noRoute
    /// The route goes out of a metered interface, and metered networks are not allowed.
    case metered(String)

    /// The reason a task that stops for it gives.
    var stateChangeReason: StateChangeReason {
        if case .metered = self { return .metered }
        return .noRoute
    }

    var reason: String {
        switch self {
        case .noRoute: "no usable route to the server"
        case .metered(let interface):
            "the route goes over \(interface), which is metered, and metered networks are not allowed"
        }
    }
}

/// The policy in force and the interfaces the system says are metered, readable from any
/// thread (the transfers' retry loops ask).
final class PolicyBox: Sendable {
    private let value: Mutex<(policy: NetworkPolicy, meteredBySystem: Set<String>)>
    init(_ policy: NetworkPolicy) { value = Mutex((policy, [])) }

    var policy: NetworkPolicy {
        get { value.withLock { $0.policy } }
        set { value.withLock { $0.policy = newValue } }
    }

    /// The interfaces NetworkManager says are metered (empty where it does not run).
    var meteredBySystem: Set<String> {
        get { value.withLock { $0.meteredBySystem } }
        set { value.withLock { $0.meteredBySystem = newValue } }
    }

    /// Whether `interface` is metered: by the user's patterns, or by the system's word.
    func isMetered(_ interface: String) -> Bool {
        value.withLock { $0.policy.isMetered(interface) || $0.meteredBySystem.contains(interface) }
    }

    /// Why a download cannot use `route` now, or nil when it can.
    func block(for route: NetworkMonitor.Route?, allowsMetered: Bool) -> NetworkBlock? {
        let (policy, system) = value.withLock { ($0.policy, $0.meteredBySystem) }
        return policy.block(for: route, allowsMetered: allowsMetered, meteredBySystem: system)
    }
}

/// The network as a manager that watches it sees it: the default route, whether it is
/// metered, and the policy. ``DownloadEvent/networkChanged(_:)`` carries it each time one
/// of these changes.
public struct NetworkStatus: Sendable, Equatable {
    /// Where traffic leaves by default; nil when there is no default route.
    public var defaultRoute: NetworkMonitor.Route?
    /// Whether the default route's interface is metered (by the user's patterns or by
    /// NetworkManager's word).
    public var isMetered: Bool
    /// Whether downloads may use metered networks (``NetworkPolicy/allowsMetered``).
    public var allowsMetered: Bool
    /// The interfaces NetworkManager says are metered; empty where it does not run.
    public var meteredBySystem: [String]

    public init(
        defaultRoute: NetworkMonitor.Route?,
        isMetered: Bool,
        allowsMetered: Bool,
        meteredBySystem: [String] = []
    ) {
        self.defaultRoute = defaultRoute
        self.isMetered = isMetered
        self.allowsMetered = allowsMetered
        self.meteredBySystem = meteredBySystem
    }

    /// Whether the default route's interface is up with a carrier.
    public var isConnected: Bool { defaultRoute?.isUsable == true }
}

/// The routes to hosts, as the kernel chose them since the network last changed: a
/// download's start asks it instead of the kernel (each look is a socket, a connect and an
/// interface listing; 200 small files made 200 of them for one host).
///
/// Kept only while a ``NetworkMonitor`` watches, which empties it at each change of links,
/// addresses or routes. A failure's question — is the route gone? — is asked afresh, not here:
/// the change that answers it may not have been seen yet.
final class RouteCache: Sendable {
    private struct State {
        var watching = false
        /// Counts changes: a look that began before one is not kept after it.
        var generation = 0
        var routes: [String: NetworkMonitor.Route?] = [:]
    }
    private let state = Mutex(State())
    /// Asks the kernel (a test's stand-in counts the looks).
    private let lookUp: @Sendable (String) -> NetworkMonitor.Route?

    init(lookUp: @escaping @Sendable (String) -> NetworkMonitor.Route? = { NetworkMonitor.route(to: $0) }) {
        self.lookUp = lookUp
    }

    /// The route to `host`: the one looked up since the last change, else the kernel's now.
    func route(to host: String) -> NetworkMonitor.Route? {
        let (known, generation) = state.withLock { ($0.watching ? $0.routes[host] : nil, $0.generation) }
        if let known { return known }
        let route = lookUp(host)
        state.withLock { state in
            // Bounded: a manager reaches few hosts, but a list of thousands must not grow it.
            if state.watching, state.generation == generation, state.routes.count < 1024 {
                state.routes[host] = .some(route)
            }
        }
        return route
    }

    /// The network changed, or watching began or ended: everything is looked up again.
    func forget(watching: Bool) {
        state.withLock { state in
            state.watching = watching
            state.generation += 1
            state.routes = [:]
        }
    }
}
