import HaulTestSupport
import Synchronization
import Testing

@testable import Haul

/// The routes a download starts on are looked up once per host between changes of the
/// network, and never kept across a change.
@Suite(.timeLimit(.minutes(10))) struct RouteCacheTests {
    /// A stand-in for the kernel's answer, counting the looks.
    private final class Kernel: Sendable {
        let looks = Mutex<[String]>([])
        let interface = Mutex("eth0")
        /// Runs during a look (a change of the network arriving meanwhile).
        let during = Mutex<(@Sendable () -> Void)?>(nil)

        func route(to host: String) -> NetworkMonitor.Route? {
            looks.withLock { $0.append(host) }
            during.withLock { $0 }?()
            return NetworkMonitor.Route(interface: interface.withLock { $0 }, sourceAddress: "10.0.0.2", isUsable: true)
        }
    }

    @Test("brackets around an address are trimmed, however many; a host of brackets alone is no address")
    func bracketsTrimmed() {
        #expect(NetworkMonitor.route(to: "[::1]")?.interface == "lo")
        #expect(NetworkMonitor.route(to: "[[127.0.0.1]]")?.interface == "lo")
        #expect(NetworkMonitor.route(to: "]127.0.0.1[")?.interface == "lo")
        // No address: the route any other host would take (none on a machine without one).
        for host in ["", "[", "]]", "[]", "[\u{301}]", "[127.0.0.1\u{301}]"] {
            #expect(NetworkMonitor.route(to: host)?.interface == NetworkMonitor.route(to: "example.org")?.interface)
        }
    }

    @Test("while watching: one look per host until the network changes, then a new look with the new answer")
    func keptUntilChange() {
        let kernel = Kernel()
        let cache = RouteCache(lookUp: kernel.route)
        cache.forget(watching: true)
        #expect(cache.route(to: "a.example")?.interface == "eth0")
        #expect(cache.route(to: "a.example")?.interface == "eth0")
        #expect(cache.route(to: "b.example")?.interface == "eth0")
        #expect(kernel.looks.withLock { $0 } == ["a.example", "b.example"])

        kernel.interface.withLock { $0 = "wwan0" }
        cache.forget(watching: true)
        #expect(cache.route(to: "a.example")?.interface == "wwan0")
        #expect(kernel.looks.withLock { $0 } == ["a.example", "b.example", "a.example"])
    }

    @Test("not watching (no monitor, or it stopped): every start asks the kernel")
    func notWatchingLooksEachTime() {
        let kernel = Kernel()
        let cache = RouteCache(lookUp: kernel.route)
        _ = cache.route(to: "a.example")
        _ = cache.route(to: "a.example")
        cache.forget(watching: true)
        _ = cache.route(to: "a.example")
        cache.forget(watching: false)
        _ = cache.route(to: "a.example")
        _ = cache.route(to: "a.example")
        #expect(kernel.looks.withLock { $0 }.count == 5)
    }

    @Test("a look during which the network changed is not kept")
    func lookStraddlingAChangeIsNotKept() {
        let kernel = Kernel()
        let cache = RouteCache(lookUp: kernel.route)
        cache.forget(watching: true)
        kernel.during.withLock { $0 = { cache.forget(watching: true) } }
        _ = cache.route(to: "a.example")
        kernel.during.withLock { $0 = nil }
        _ = cache.route(to: "a.example")
        _ = cache.route(to: "a.example")
        #expect(kernel.looks.withLock { $0 }.count == 2)
    }
}
