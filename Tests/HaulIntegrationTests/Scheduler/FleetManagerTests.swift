import Foundation
import HaulPostgres
import HaulTestSupport
import HaulTesting
import Logging
import Synchronization
import Testing

@testable import Haul

/// Fleet mode in the manager: several daemons' managers (background) on one PostgreSQL
/// database share its queue — a task runs on a node only under that node's lease, the
/// fleet-wide limit holds at the server, and each download is fetched once.
@Suite("Fleet of managers on PostgreSQL", .postgresServer, .timeLimit(.minutes(20)))
struct FleetManagerTests {
    /// How many runs each node started.
    final class StartCounts: Sendable {
        private let counts = Mutex<[String: Int]>([:])
        func add(_ node: String) { counts.withLock { $0[node, default: 0] += 1 } }
        var all: [String: Int] { counts.withLock { $0 } }
    }

    /// The tasks told completed, in order (one may appear twice: that is a fault).
    final class CompletionCount: Sendable {
        private let ids = Mutex<[UUID]>([])
        func add(_ id: UUID) { ids.withLock { $0.append(id) } }
        var all: [UUID] { ids.withLock { $0 } }
    }

    /// Starts from the tests' downloader settings, on `store`.
    static func configuration(
        _ store: PostgresStore,
        limit: Int,
        perHost: Int = 100,
        checkpoints: Duration = .milliseconds(250)
    ) -> DownloadManager.Configuration {
        var downloader = testConfiguration(store: "")
        downloader.store = .postgres(store)
        downloader.checkpointInterval = checkpoints
        downloader.logger = debugLogger(label: store.node, level: .info)
        var configuration = DownloadManager.Configuration(
            downloader: downloader,
            maxConcurrentDownloads: limit,
            maxDownloadsPerHost: perHost,
            background: true
        )
        configuration.recoversTasks = true
        configuration.sharedQueue = store
        return configuration
    }

    /// The nodes, each a store of its own on one new database; nothing when there is no server.
    static func withNodes(
        _ names: [String],
        lease: Duration = .seconds(15),
        _ body: ([PostgresStore]) async throws -> Void
    ) async throws {
        guard let server = PostgresServer.current else { return }
        let location = try await server.newDatabase()
        var nodes: [PostgresStore] = []
        for name in names {
            nodes.append(
                try await PostgresStore.connect(
                    to: location,
                    node: name,
                    leaseDuration: lease,
                    logger: StoreEngine.logger
                )
            )
        }
        do {
            try await body(nodes)
        } catch {
            for node in nodes { try? await node.closeDatabase() }
            throw error
        }
        for node in nodes { try await node.closeDatabase() }
    }

    @Test("three nodes share one queue: every download completes once, never more at once than each node's own limit")
    func threeNodesShareTheQueue() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            let count = 18
            for index in 0..<count {
                server.set("/f\(index)", .init(size: 512 << 10, seed: UInt64(index), bytesPerSecond: 512 << 10))
            }
            try await Self.withNodes(["a", "b", "c"]) { nodes in
                let started = StartCounts()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for (index, node) in nodes.enumerated() {
                        group.addTask {
                            try await DownloadManager.withDownloadManager(
                                configuration: Self.configuration(node, limit: 1)
                            ) { manager in
                                let events = manager.events()
                                let watcher = Task {
                                    for await event in events {
                                        if case .stateChanged(_, _, .running, _) = event {
                                            started.add(node.node)
                                        }
                                    }
                                }
                                if index == 0 {
                                    _ = try await manager.download(
                                        (0..<count).map {
                                            DownloadRequest(
                                                url: server.url("/f\($0)"),
                                                destination: .directory(temp.path)
                                            )
                                        }
                                    )
                                }
                                let done = try await waitUntil(timeout: .seconds(120)) {
                                    let infos = try await node.infos(ids: nil, background: true, session: nil)
                                    return infos.count == count && infos.allSatisfy { $0.state == .completed }
                                }
                                let unfinished = try await node.fleet.report.entries().filter {
                                    $0.state != "completed"
                                }
                                #expect(done, "unfinished: \(unfinished)")
                                watcher.cancel()
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                for index in 0..<count {
                    #expect(sha256(file: temp.file("f\(index)")) == server.sha256("/f\(index)"))
                    #expect(server.requests(for: "/f\(index)").count == 1, "f\(index) was fetched more than once")
                }
                #expect(server.maxActiveResponses <= 3, "one at once on each of three nodes")
                let runs = started.all
                #expect(runs.values.reduce(0, +) == count, "\(runs)")
                #expect(runs.count >= 2, "the work went to one node only: \(runs)")
                // Nothing is left leased.
                #expect(try await nodes[0].fleet.report.entries().allSatisfy { $0.owner == nil })
            }
        }
    }

    @Test(
        "six hundred tiny downloads through three nodes: each task leased once, each file fetched once and whole, nothing left leased"
    )
    func manyTinyTasks() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            let count = 600
            for index in 0..<count {
                server.set("/t\(index)", .init(size: 1024 + index, seed: UInt64(index)))
            }
            try await Self.withNodes(["a", "b", "c"]) { nodes in
                let started = StartCounts()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for (index, node) in nodes.enumerated() {
                        group.addTask {
                            try await DownloadManager.withDownloadManager(
                                configuration: Self.configuration(node, limit: 12)
                            ) { manager in
                                let events = manager.events()
                                let watcher = Task {
                                    for await event in events {
                                        if case .stateChanged(_, _, .running, _) = event { started.add(node.node) }
                                    }
                                }
                                defer { watcher.cancel() }
                                if index == 0 {
                                    _ = try await manager.download(
                                        (0..<count).map {
                                            DownloadRequest(
                                                url: server.url("/t\($0)"),
                                                destination: .directory(temp.path)
                                            )
                                        }
                                    )
                                }
                                let done = try await waitUntil(timeout: .seconds(300), every: .milliseconds(200)) {
                                    try await node.fleet.report.stateCounts() == ["completed": count]
                                }
                                let counts = try await node.fleet.report.stateCounts()
                                #expect(done, "\(counts)")
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                let entries = try await nodes[0].fleet.report.entries()
                #expect(entries.count == count)
                let twice = entries.filter { $0.fence != 1 || $0.owner != nil || $0.state != "completed" }
                #expect(twice.isEmpty, "\(twice.count) leased more than once, or left leased: \(twice.prefix(3))")
                for index in 0..<count {
                    #expect(server.requests(for: "/t\(index)").count == 1, "t\(index) was fetched more than once")
                    #expect(sha256(file: temp.file("t\(index)")) == server.sha256("/t\(index)"))
                }
                #expect(server.maxActiveResponses <= 12)
                let runs = started.all
                #expect(runs.values.reduce(0, +) == count, "\(runs)")
                #expect(runs.count == 3, "the work went to fewer than three nodes: \(runs)")
            }
        }
    }

    @Test(
        "a pause, resume and cancel given to another node reach the node running the task: it stops, writes nothing more, and the task goes on from its checkpoint"
    )
    func operationsFromAnotherNode() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/p", .init(size: 4 << 20, seed: 1, bytesPerSecond: 512 << 10))
            // A minute long: it cannot complete before the cancel comes, however loaded the
            // machine (a cancel after the completion is refused; FleetQueueTests checks that).
            server.set("/c", .init(size: 16 << 20, seed: 2, bytesPerSecond: 256 << 10))
            try await Self.withNodes(["a", "b"]) { nodes in
                let a = try DownloadManager(configuration: Self.configuration(nodes[0], limit: 4))
                try await DownloadManager.withDownloadManager(configuration: Self.configuration(nodes[1], limit: 4)) {
                    b in
                    let events = b.events()
                    let told = StateLog()
                    let watcher = told.record(events)
                    defer { watcher.cancel() }
                    let p = try await b.download(
                        DownloadRequest(url: server.url("/p"), destination: .directory(temp.path))
                    )
                    let c = try await b.download(
                        DownloadRequest(url: server.url("/c"), destination: .directory(temp.path))
                    )
                    // Both run on b, with bytes committed.
                    #expect(
                        try await waitUntil {
                            let infos = try await nodes[0].infos(ids: [p.id, c.id], background: true, session: nil)
                            return infos.allSatisfy { $0.node == "b" && $0.bytesCommitted > 0 }
                        }
                    )

                    // Node a joins now (b holds both): it takes the user's operations, as a
                    // daemon answering its clients would.
                    let aRuns = Task { try await a.run() }
                    defer { aRuns.cancel() }

                    // Paused through a: b stops it (at its next write), with the store's state.
                    _ = try await a.pause(p.id)
                    #expect(try await waitUntil { told.contains(p.id, .paused, .revoked) }, "\(told.all)")
                    #expect(try await waitUntil { await b.runningTaskIDs == [c.id] })
                    let paused = try #require(
                        try await nodes[0].infos(ids: [p.id], background: true, session: nil).first
                    )
                    #expect(paused.state == .paused && paused.node == nil)
                    let requests = server.requests(for: "/p").count

                    // Cancelled through a: b stops that one too; its part file is gone.
                    try await a.cancel(c.id)
                    #expect(try await waitUntil { told.contains(c.id, .cancelled, .revoked) }, "\(told.all)")
                    #expect(try await nodes[0].task(id: c.id)?.state == .cancelled)
                    #expect(try await waitUntil { server.activeResponses == 0 }, "b must really stop")

                    // Resumed through a: b takes it again and continues from its checkpoint.
                    server.update("/p") { $0.bytesPerSecond = nil }
                    _ = try await a.resume(p.id)
                    #expect(
                        try await waitUntil(timeout: .seconds(60)) {
                            try await nodes[0].task(id: p.id)?.state == .completed
                        }
                    )
                    #expect(sha256(file: temp.file("p")) == server.sha256("/p"))
                    #expect(server.requests(for: "/p").count == requests + 1)
                    #expect(server.requests(for: "/p").last?.header("Range")?.hasPrefix("bytes=") == true)
                    #expect(!FileManager.default.fileExists(atPath: temp.file("c")))
                    await a.shutdown()
                    try await aRuns.value
                }
            }
        }
    }

    /// The state changes a manager told, in order.
    final class StateLog: Sendable {
        private let changes = Mutex<[(UUID, TaskState, StateChangeReason)]>([])
        func add(_ id: UUID, _ to: TaskState, _ reason: StateChangeReason) {
            changes.withLock { $0.append((id, to, reason)) }
        }
        func contains(_ id: UUID, _ to: TaskState, _ reason: StateChangeReason) -> Bool {
            changes.withLock { $0.contains { $0.0 == id && $0.1 == to && $0.2 == reason } }
        }
        var all: [String] { changes.withLock { $0.map { "\($0.0.uuidString.prefix(4)) \($0.1) \($0.2)" } } }

        /// Records every state change of `events` until the returned task is cancelled.
        func record(_ events: DownloadEvents) -> Task<Void, Never> {
            Task {
                for await event in events {
                    if case .stateChanged(let id, _, let to, let reason) = event { self.add(id, to, reason) }
                }
            }
        }
    }

    @Test("a new task a claim finds before its add has announced it is announced once, before it runs")
    func claimedBeforeAnnounced() async throws {
        let temp = try TemporaryDirectory()
        try await TestServer.withServer { server in
            server.set("/x", .init(size: 64 << 10, seed: 1))
            server.set("/y", .init(size: 64 << 10, seed: 2))
            try await Self.withNodes(["a"]) { nodes in
                try await DownloadManager.withDownloadManager(configuration: Self.configuration(nodes[0], limit: 2)) {
                    manager in
                    let told = EventList(manager.events())
                    let x = DownloadRequest(url: server.url("/x"), destination: .directory(temp.path))
                    let y = DownloadRequest(url: server.url("/y"), destination: .directory(temp.path))
                    let first = try await manager.download(x)
                    #expect(try await waitUntil { try await manager.info(first.id).state == .completed })
                    // An add of x again and of y, held at x (its turn taken) after both are
                    // recorded: y is in the shared queue, not yet announced, when a claim runs.
                    let (taken, turnTaken) = AsyncStream<Void>.makeStream()
                    let (gate, openGate) = AsyncStream<Void>.makeStream()
                    let holder = Task { await manager.holdTurn(first.id, taken: turnTaken, until: gate) }
                    for await _ in taken { break }
                    let adding = Task { try await manager.download([x, y]) }
                    #expect(
                        try await waitUntil {
                            try await nodes[0].infos(ids: nil, background: true, session: nil).count == 2
                        }
                    )
                    await manager.claimWaitingTasks()
                    openGate.finish()
                    let infos = try await adding.value
                    await holder.value
                    let yID = infos[1].id
                    #expect(try await waitUntil { try await manager.info(yID).state == .completed })
                    let events = told.events(of: yID)
                    told.task.cancel()
                    #expect(events.filter { $0 == "added" }.count == 1, "\(events)")
                    #expect(events.first == "added", "\(events)")
                }
            }
            #expect(sha256(file: temp.file("y")) == server.sha256("/y"))
            #expect(server.requests(for: "/y").count == 1)
        }
    }
}

extension DownloadManager {
    /// Takes task `id`'s turn, as a user's operation on it does, tells `taken`, and keeps it
    /// until `gate` ends.
    fileprivate func holdTurn(_ id: UUID, taken: AsyncStream<Void>.Continuation, until gate: AsyncStream<Void>) async {
        try? await inTurn(id) {
            taken.yield()
            for await _ in gate {}
        }
    }
}

/// The events a manager told, as kinds by task, collected as they come.
private struct EventList {
    final class Kinds: Sendable {
        private let list = Mutex<[(UUID, String)]>([])
        func append(_ id: UUID, _ kind: String) { list.withLock { $0.append((id, kind)) } }
        func of(_ id: UUID) -> [String] { list.withLock { $0.filter { $0.0 == id }.map(\.1) } }
    }

    let kinds = Kinds()
    let task: Task<Void, Never>

    init(_ events: DownloadEvents) {
        let kinds = self.kinds
        task = Task {
            for await event in events {
                let kind: String? =
                    switch event {
                    case .added: "added"
                    case .stateChanged(_, _, let to, _): "\(to)"
                    case .completed: "completed"
                    default: nil
                    }
                if let kind, let id = event.taskID { kinds.append(id, kind) }
            }
        }
    }

    func events(of id: UUID) -> [String] { kinds.of(id) }
}
