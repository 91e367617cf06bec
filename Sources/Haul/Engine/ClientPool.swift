import AsyncHTTPClient
import NIOCore
import NIOPosix
import Synchronization
import Tracing

/// The HTTP clients of a downloader: one for direct connections and one per proxy that
/// tunnels (`CONNECT`, SOCKS5), made when first needed. AsyncHTTPClient sets its proxy per
/// client, and every hop of a redirect may choose another.
final class ClientPool: Sendable {
    /// The event loops downloads read their connections on: a group of their own, apart from
    /// NIO's shared one where a daemon serves its API, since a download may write what it
    /// read on the loop that read it (``WritePlacement``).
    static let loops = MultiThreadedEventLoopGroup(numberOfThreads: System.coreCount)

    let direct: HTTPClient
    private let configuration: HTTPClient.Configuration
    private let proxied = Mutex<[ProxyEndpoint: HTTPClient]>([:])

    init(configuration: HTTPClient.Configuration) {
        self.configuration = configuration
        direct = HTTPClient(eventLoopGroup: ClientPool.loops, configuration: configuration)
    }

    /// The client that reaches servers through `proxy` (nil: directly).
    func client(through proxy: ProxyEndpoint?) -> HTTPClient {
        guard let proxy else { return direct }
        return proxied.withLock { clients in
            if let client = clients[proxy] { return client }
            var configuration = self.configuration
            switch proxy.kind {
            case .http:
                configuration.proxy = .server(
                    host: proxy.host,
                    port: proxy.port,
                    authorization: proxy.username.map {
                        .basic(username: $0, password: proxy.password ?? "")
                    }
                )
            case .socks5:
                configuration.proxy = .socksServer(host: proxy.host, port: proxy.port)
            }
            let client = HTTPClient(eventLoopGroup: ClientPool.loops, configuration: configuration)
            clients[proxy] = client
            return client
        }
    }

    /// Shuts every client down.
    func shutdown() async throws {
        let clients = proxied.withLock { clients in
            defer { clients.removeAll() }
            return Array(clients.values)
        }
        for client in clients { try? await client.shutdown() }
        try await direct.shutdown()
    }
}

extension HTTPClient.Configuration {
    /// What every HTTP client of Haul's starts from — a downloader's and the daemon's clients:
    /// redirects and decompression left to Haul (it follows redirects itself, and writes the
    /// bytes the server sent), and spans only for a program that set up a tracer. With none
    /// (Haul sets up none), AsyncHTTPClient's default, the global no-op tracer, would still be
    /// handed a span to make and drop for every request.
    package static var haul: HTTPClient.Configuration {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.decompression = .disabled
        if configuration.tracing.tracer is NoOpTracer { configuration.tracing.tracer = nil }
        return configuration
    }
}
