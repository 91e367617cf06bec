import Foundation
import HTTPTypes
import HaulClient
import HaulTestSupport
import HaulWire
import HaulWireMapping
import Hummingbird
import HummingbirdTesting
import Logging
import NIOCore
import Testing

@testable import Haul
@testable import HaulDaemon

/// The API's routes in process (HummingbirdTesting's router framework: no socket, no
/// daemon process), over a real manager and a real store. DaemonTests and APIHardeningTests
/// drive the same routes through the daemon's socket.
@Suite("API routes in process", .timeLimit(.minutes(10)))
struct RouteTests {
    /// Runs `body` with a test client of the API over a manager on a temporary store.
    private func withAPI(
        token: String? = nil,
        _ body: @escaping @Sendable (any TestClientProtocol) async throws -> Void
    ) async throws {
        try await Self.withAPI(token: token) { client, _ in try await body(client) }
    }

    /// The same, with the daemon's core as well.
    static func withAPI(
        token: String? = nil,
        _ body: @escaping @Sendable (any TestClientProtocol, DaemonCore) async throws -> Void
    ) async throws {
        let temp = try TemporaryDirectory()
        let home = HaulHome(path: temp.file("home"))
        try FileManager.default.createDirectory(atPath: home.path, withIntermediateDirectories: true)
        var logger = Logger(label: "haul.routes.test")
        logger.logLevel = .warning
        let store = try await Store.opened(at: home.storePath)
        try await store.migrateEventLog()  // As the daemon does, for its event log's tables.
        let configuration = DownloadManager.Configuration(
            store: .store(store),
            recoversTasks: false,
            background: true
        )
        try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
            let core = DaemonCore(
                manager: manager,
                sessionStore: store,
                eventLog: EventLog(store: store, limitPerSession: 1000, logger: logger),
                paths: DaemonPaths(home: home),
                logger: logger
            )
            let app = Application(router: Routes.router(core: core, token: token), logger: logger)
            try await app.test(.router) { client in try await body(client, core) }
        }
    }

    private static func failure(_ response: TestResponse) throws -> API.Failure {
        try JSONDecoder().decode(API.Failure.self, from: Data(buffer: response.body))
    }

    @Test("status answers the daemon's facts as JSON; health which daemon answers")
    func status() async throws {
        try await withAPI { client in
            try await client.execute(uri: "/v1/status", method: .get) { response in
                #expect(response.status == .ok)
                let status = try HaulJSON.decoder.decode(API.Status.self, from: Data(buffer: response.body))
                #expect(status.pid == getpid())
                #expect(status.tasks.isEmpty && status.running == 0)
            }
            // The probe clients use: which daemon, counting nothing.
            try await client.execute(uri: "/v1/health", method: .get) { response in
                #expect(response.status == .ok)
                let health = try HaulJSON.decoder.decode(API.Health.self, from: Data(buffer: response.body))
                #expect(health == API.Health(pid: getpid(), version: HaulVersion.current, listen: nil))
            }
        }
    }

    @Test("a task id that is not a UUID is 400; an unknown one is 404 by its error code, not its words")
    func taskIDs() async throws {
        try await withAPI { client in
            try await client.execute(uri: "/v1/tasks/not-a-uuid", method: .get) { response in
                #expect(response.status == .badRequest)
                let failure = try Self.failure(response)
                #expect(failure.error == "Invalid task id 'not-a-uuid'")
            }
            let id = UUID()
            try await client.execute(uri: "/v1/tasks/\(id)", method: .get) { response in
                #expect(response.status == .notFound)
                let failure = try Self.failure(response)
                #expect(failure.code == "notFound")
            }
        }
    }

    @Test("unknown paths are a JSON 404; a known path with another method is 405 with Allow")
    func unknownEndpoints() async throws {
        try await withAPI { client in
            try await client.execute(uri: "/v1/nothing", method: .get) { response in
                #expect(response.status == .notFound)
                let failure = try Self.failure(response)
                #expect(failure.code == "notFound")
            }
            try await client.execute(uri: "/v1/status", method: .put) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.allow] == "GET")
                let failure = try Self.failure(response)
                #expect(failure.code == "methodNotAllowed")
            }
        }
    }

    @Test("settings change live and read back; a bad body names its field and changes nothing")
    func settings() async throws {
        try await withAPI { client in
            let change = ByteBuffer(string: #"{"maxConcurrentDownloads": 7, "overallRateLimit": 1048576}"#)
            try await client.execute(uri: "/v1/settings", method: .put, body: change) { response in
                #expect(response.status == .ok)
            }
            let bad = ByteBuffer(string: #"{"maxConcurrentDownloads": "many"}"#)
            try await client.execute(uri: "/v1/settings", method: .put, body: bad) { response in
                #expect(response.status == .badRequest)
                let failure = try Self.failure(response)
                #expect(
                    failure.error
                        == "Invalid request body: field 'maxConcurrentDownloads' must be a whole number that fits in 64 bits"
                )
            }
            try await client.execute(uri: "/v1/settings", method: .get) { response in
                let settings = try JSONDecoder().decode(API.Settings.self, from: Data(buffer: response.body))
                #expect(
                    settings
                        == API.Settings(
                            maxConcurrentDownloads: 7,
                            maxDownloadsPerHost: 8,
                            maxConnectionsPerHost: 16,
                            overallRateLimit: 1 << 20,
                            allowMetered: true,
                            meteredInterfaces: ["wwan*", "ppp*"],
                            lowestSpeedLimit: 0,
                            lowestSpeedTime: 30
                        )
                )
            }
        }
    }

    @Test("a download added with a rate limit of 0 has none, as 0 means everywhere a rate is given")
    func zeroRateIsNone() async throws {
        try await withAPI { client in
            let temp = try TemporaryDirectory()
            let body =
                #"{"downloads": [{"url": "http://127.0.0.1:9/x", "directory": "\#(temp.path)", "rateLimit": 0}]}"#
            try await client.execute(
                uri: "/v1/tasks",
                method: .post,
                headers: [.contentType: "application/json"],
                body: ByteBuffer(string: body)
            ) { response in
                #expect(response.status == .ok, "\(String(buffer: response.body))")
                let tasks = try HaulJSON.decoder.decode([API.Task].self, from: Data(buffer: response.body))
                #expect(tasks.count == 1 && tasks.first?.rateLimit == nil)
            }
        }
    }

    @Test("sessions list as JSON; a session name that is not one is 400")
    func sessions() async throws {
        try await withAPI { client in
            try await client.execute(uri: "/v1/sessions", method: .get) { response in
                #expect(response.status == .ok)
                #expect(String(buffer: response.body) == "[]")
            }
            try await client.execute(uri: "/v1/sessions/a%20b/log", method: .get) { response in
                #expect(response.status == .badRequest)
                let failure = try Self.failure(response)
                #expect(failure.code == "invalidArgument")
            }
        }
    }

    @Test("with a token, a request without it is 401 before any route runs")
    func token() async throws {
        try await withAPI(token: "s3cret") { client in
            try await client.execute(uri: "/v1/status", method: .get) { response in
                #expect(response.status == .unauthorized)
                let failure = try Self.failure(response)
                #expect(failure.code == "unauthorized")
            }
            try await client.execute(uri: "/v1/status", method: .get, headers: [.authorization: "Bearer s3cret"]) {
                response in
                #expect(response.status == .ok)
            }
        }
    }
}
