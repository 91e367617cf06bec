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

    /// Why a download cannot use its route now, or nil when it can.
    func block(for route: NetworkMonitor.Route?, allowsMetered taskAllows: Bool) -> NetworkBlock? {
        guard let route, route.isUsable else { return .noRoute }
        if isMetered(route.interface), !(allowsMetered && taskAllows) { return .metered(route.interface) }
        return nil
    }
}

/// Why a download waits for the network.
enum NetworkBlock: Sendable, Equatable {
    /// No route, or one over an interface that is down.
    case noRoute
    /// The route goes out of a metered interface, and metered networks are not allowed.
    case metered(String)

    var reason: String {
        switch self {
        case .noRoute: "no usable route to the server"
        case .metered(let interface):
            "the route goes over \(interface), which is metered, and metered networks are not allowed"
        }
    }
}

/// The policy in force, readable from any thread (the transfers' retry loops ask).
final class PolicyBox: Sendable {
    private let value: Mutex<NetworkPolicy>
    init(_ policy: NetworkPolicy) { value = Mutex(policy) }
    var policy: NetworkPolicy {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}
