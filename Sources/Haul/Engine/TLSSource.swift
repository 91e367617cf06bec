import NIOSSL
import Synchronization

/// A task's TLS configuration, loaded when its first https request needs it (an http download
/// never reads certificate files), then shared by its connections.
final class TLSSource: Sendable {
    let options: TLSOptions
    private let loaded = Mutex<TLSConfiguration?>(nil)

    init(_ options: TLSOptions) {
        self.options = options
    }

    /// nil for the defaults: the client's own configuration.
    func configuration() async throws -> TLSConfiguration? {
        if options.isDefault { return nil }
        if let configuration = loaded.withLock({ $0 }) { return configuration }
        let configuration = try await options.configuration()
        loaded.withLock { $0 = configuration }
        return configuration
    }
}
