import Foundation
import GRDB
import HaulPostgres
import HaulTestSupport
import PostgresNIO
import Testing

@testable import Haul

/// The store's rules, on both engines: the embedded SQLite store and fleet mode's
/// PostgreSQL store hold tasks the same way — every column round-trips, each intent writes
/// its own group, adds never make two tasks for one destination, a layout no transfer could
/// have written is refused in one sentence.
@Suite("Task store engines", .postgresServer, .timeLimit(.minutes(10)))
struct TaskStoreTests {
    @Test("every column of a task reads back as written, each group non-default", arguments: StoreEngine.allCases)
    func everyColumn(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withStore(temp) { store in
            var task = StoreRecords.record("https://u:pw@example.test/a%20b.bin?x=1", into: temp.path, name: "a.bin")
            task.requestHeaders = [HTTPHeaderField(name: "Authorization", value: "Bearer t")]
            task.checksum = try Checksum(parsing: "sha256=" + String(repeating: "ab", count: 32))
            task.overwrite = true
            task.state = .paused
            task.priority = 7
            task.validators = Validators(
                etag: "\"e1\"",
                lastModified: "Tue, 01 Jan 2030 00:00:00 GMT",
                totalLength: 4096
            )
            task.serverDate = "Tue, 01 Jan 2030 00:00:01 GMT"
            task.finalURL = URL(string: "https://cdn.example.test/a.bin")
            task.errorMessage = "HTTP 503"
            task.connections = 4
            task.minSplitSize = 1 << 20
            task.rateLimit = 100_000
            task.partPath = temp.file("a.bin.haul")
            task.partIdentity = "1:2"
            task.tls = TLSOptions(certificateAuthorities: "/etc/ca.pem", verifiesCertificates: false)
            task.proxy = ProxySettings(all: "http://proxy.test:3128", noProxy: ["local.test"])
            task.credentials = Credentials(user: "u", password: "p")
            task.cookies = CookieOptions(enabled: true, header: "a=b")
            task.allowsMetered = false
            task.checkNewer = true
            task.continuesExisting = true
            task.hooks = Hooks(onComplete: "/bin/true")
            task.sources = [DownloadSource(url: URL(string: "https://m.example.test/a.bin")!, bytes: 10)]
            task.maxConnectionsPerServer = 2
            task.followsMetalink = false
            task.nextTryAt = Date(timeIntervalSince1970: 1_900_000_000.25)
            task.retryingSince = Date(timeIntervalSince1970: 1_900_000_000)
            // Stored to the millisecond.
            task.createdAt = Date(timeIntervalSince1970: 1_800_000_000.125)
            task.queuedAt = Date(timeIntervalSince1970: 1_800_000_001.5)
            let segments = [
                SegmentRecord(taskID: task.id, ordinal: 0, start: 0, end: 2048, committed: 1024),
                SegmentRecord(taskID: task.id, ordinal: 1, start: 2048, end: 4096, committed: 3000),
            ]
            try await store.adopt(task, segments: segments)
            let (read, readSegments) = try #require(try await store.taskWithSegments(task.id))
            var expected = task
            expected.updatedAt = read.updatedAt
            expected.queueOrder = read.queueOrder
            #expect(read == expected)
            #expect(readSegments == segments)
            let info = try #require(try await store.infos(ids: [task.id], background: nil, session: nil).first)
            #expect(info.bytesCommitted == 1024 + 952)
            #expect(info.state == .paused && info.totalBytes == 4096 && info.sources.count == 1)
        }
    }

    @Test(
        "adds: new tasks queue in order with one empty segment; the same destination is found, its request re-added, its state kept; a refusal changes nothing",
        arguments: StoreEngine.allCases
    )
    func findOrInsert(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withStore(temp) { store in
            let a = StoreRecords.record("http://h.test/a", into: temp.path)
            let b = StoreRecords.record("http://h.test/b", into: temp.path)
            let added = try await store.findOrInsert([(a, StoreRecords.plainReAdd), (b, StoreRecords.plainReAdd)]) {
                _ in
            }
            #expect(added.map(\.isNew) == [true, true])
            #expect(added[0].record.queueOrder < added[1].record.queueOrder)
            #expect(added[0].segments == [SegmentRecord(taskID: a.id, ordinal: 0, start: 0, committed: 0)])
            try await store.setState(a.id, .paused)

            var reAdd = StoreRecords.plainReAdd
            reAdd.session = "night"
            reAdd.rateLimit = 5000
            let again = try await store.findOrInsert(
                StoreRecords.record("http://h.test/a", into: temp.path),
                reAdd: reAdd
            ) {
                _ in
            }
            #expect(!again.isNew && again.record.id == a.id)
            let readA = try #require(try await store.task(id: a.id))
            #expect(readA.session == "night" && readA.rateLimit == 5000 && readA.state == .paused)

            // A refusal of the second rolls back the first: nothing new is recorded.
            let c = StoreRecords.record("http://h.test/c", into: temp.path)
            await #expect(throws: HaulError.self) {
                _ = try await store.findOrInsert([(c, StoreRecords.plainReAdd), (b, StoreRecords.plainReAdd)]) {
                    existing in
                    if existing.id == b.id { throw HaulError(.invalidArgument, "refused") }
                }
            }
            #expect(try await store.task(id: c.id) == nil)
            #expect(
                try await store.tasks(inStates: TaskState.allCases, background: true).map(\.id) == [a.id, b.id]
            )
        }
    }

    @Test(
        "a batch of adds: new and existing keep the batch's order, a name makes another destination, one destination twice is one task, and thousands go in together",
        arguments: StoreEngine.allCases
    )
    func batchOfAdds(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withStore(temp) { store in
            let a = StoreRecords.record("http://h.test/a", into: temp.path)
            _ = try await store.findOrInsert(a, reAdd: StoreRecords.plainReAdd) { _ in }
            let named = StoreRecords.record("http://h.test/a", into: temp.path, name: "other")
            let d = StoreRecords.record("http://h.test/d", into: temp.path)
            let mixed = try await store.findOrInsert(
                [
                    (d, StoreRecords.plainReAdd),
                    (StoreRecords.record("http://h.test/a", into: temp.path), StoreRecords.plainReAdd),
                    (named, StoreRecords.plainReAdd),
                ]
            ) { _ in }
            #expect(mixed.map(\.record.id) == [d.id, a.id, named.id] && mixed.map(\.isNew) == [true, false, true])
            #expect(mixed[1].segments == [SegmentRecord(taskID: a.id, ordinal: 0, start: 0, committed: 0)])

            let e = StoreRecords.record("http://h.test/e", into: temp.path)
            let eAgain = StoreRecords.record("http://h.test/e", into: temp.path)
            let twice = try await store.findOrInsert([(e, StoreRecords.plainReAdd), (eAgain, StoreRecords.plainReAdd)])
            { _ in }
            #expect(twice.map(\.record.id) == [e.id, e.id] && twice.map(\.isNew) == [true, false])

            let many = (0..<2_500).map {
                (StoreRecords.record("http://h.test/many/\($0)", into: temp.path), StoreRecords.plainReAdd)
            }
            let added = try await store.findOrInsert(many) { _ in }
            #expect(added.map(\.record.id) == many.map(\.0.id) && added.allSatisfy(\.isNew))
            let orders = added.map(\.record.queueOrder)
            #expect(zip(orders, orders.dropFirst()).allSatisfy { $0 < $1 } && orders[0] > mixed[2].record.queueOrder)
            let stored = try await store.tasks(inStates: [.queued], background: true).map(\.id)
            #expect(stored == [a.id, d.id, named.id, e.id] + many.map(\.0.id))
            let last = try #require(try await store.taskWithSegments(many[2_499].0.id))
            #expect(last.0.queueOrder == added[2_499].record.queueOrder && last.0.url == many[2_499].0.url)
            #expect(last.1 == [SegmentRecord(taskID: many[2_499].0.id, ordinal: 0, start: 0, committed: 0)])
        }
    }

    @Test(
        "a response, checkpoints with verified pieces and sources, completion: each in one intent, read back for the run",
        arguments: StoreEngine.allCases
    )
    func runRecords(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withStore(temp) { store in
            var task = StoreRecords.record("http://h.test/p.bin", into: temp.path)
            task.pieces = try PieceHashes(
                algorithm: .sha256,
                length: 1024,
                hexDigests: [String(repeating: "0", count: 64), String(repeating: "1", count: 64)]
            )
            task = try await store.findOrInsert(task, reAdd: StoreRecords.plainReAdd) { _ in }.record
            task.fileName = "p.bin"
            task.validators = Validators(etag: "\"v\"", totalLength: 2048)
            let halves = [
                SegmentRecord(taskID: task.id, ordinal: 0, start: 0, end: 1024, committed: 0),
                SegmentRecord(taskID: task.id, ordinal: 1, start: 1024, end: 2048, committed: 1024),
            ]
            let part = temp.file("p.bin.haul")
            #expect(
                try await store.saveResponse(
                    task,
                    segments: halves,
                    claimingPart: (part, "9:9"),
                    recordingRunning: true
                )
            )
            // Another task cannot claim the same part file.
            let other = try await store.findOrInsert(
                StoreRecords.record("http://h.test/q.bin", into: temp.path),
                reAdd: StoreRecords.plainReAdd
            ) { _ in }.record
            #expect(try await store.claimPart(other.id, path: part, identity: nil) == false)
            #expect(try await store.isPartPathTaken(part, byOtherThan: other.id))
            // Its response naming that part file: the response and "running" are recorded, the part is not.
            var answered = other
            answered.fileName = "q.bin"
            let fresh = [SegmentRecord(taskID: other.id, ordinal: 0, start: 0, end: nil, committed: 0)]
            #expect(
                try await store.saveResponse(
                    answered,
                    segments: fresh,
                    claimingPart: (part, nil),
                    recordingRunning: true
                )
                    == false
            )
            let otherRun = try #require(try await store.taskForRun(other.id)).0
            #expect(otherRun.state == .running && otherRun.fileName == "q.bin" && otherRun.partPath == nil)

            var done = halves
            done[0].committed = 1024
            try await store.checkpoint(
                task.id,
                segments: done,
                sources: [DownloadSource(url: task.url, bytes: 1024)],
                verifiedPieces: [0b01],
                completing: false
            )
            let (run, segments) = try #require(try await store.taskForRun(task.id))
            #expect(run.state == .running && run.etag == "\"v\"" && run.fileName == "p.bin")
            #expect(run.partPath == part && run.sources.first?.bytes == 1024)
            #expect(segments == done)
            let pieces = try #require(run.storedPieces ?? nil)
            #expect(pieces.hashes.count == 2 && pieces.verified == [0b01])
            // A shared queue's claims read the same in one go (PostgreSQL), for the tasks
            // that exist; SQLite leaves each run to read its own.
            let claimed = try await store.tasksForRun(ids: [UUID(), task.id])
            #expect(claimed.map(\.task.id) == [task.id] && claimed.first?.task.partPath == part)
            #expect(claimed.first?.segments == (engine == .postgres ? done : nil))
            #expect((claimed.first?.task.storedPieces ?? nil)?.verified == (engine == .postgres ? [0b01] : nil))

            try await store.checkpoint(task.id, segments: done, sources: nil, verifiedPieces: nil, completing: true)
            let completed = try #require(try await store.task(id: task.id))
            #expect(completed.state == .completed && completed.partPath == nil)
            try await store.clearVerifiedPieces(of: task.id)
            #expect(try await store.pieces(of: task.id)?.verified == nil)
        }
    }

    @Test(
        "states, retries, the queue's order, priorities, rate limits, listings by session and removal",
        arguments: StoreEngine.allCases
    )
    func queueIntents(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withStore(temp) { store in
            var ids: [UUID] = []
            for (index, session) in ["a", "a", "b"].enumerated() {
                var reAdd = StoreRecords.plainReAdd
                reAdd.session = session
                let record = StoreRecords.record("http://h.test/\(index)", into: temp.path, session: session)
                ids.append(try await store.findOrInsert(record, reAdd: reAdd) { _ in }.record.id)
            }
            try await store.setState(ids[0], .failed, error: "HTTP 404", code: .httpStatus, forgettingPart: false)
            let failed = try #require(try await store.infos(ids: [ids[0]], background: nil, session: nil).first)
            #expect(failed.state == .failed && failed.errorMessage == "HTTP 404" && failed.errorCode == .httpStatus)

            let next = Date(timeIntervalSince1970: 2_000_000_000)
            try await store.setRetrying(ids[1], error: "reset", nextTryAt: next, since: next.addingTimeInterval(-60))
            let retrying = try #require(try await store.task(id: ids[1]))
            #expect(retrying.state == .retrying && retrying.nextTryAt == next)

            // Back of the line; then the first and last swap places.
            let order = try await store.requeue(ids[0], state: .queued)
            #expect(try await store.task(id: ids[0])?.queueOrder == order)
            #expect(try await store.task(id: ids[0])?.errorMessage == nil)
            #expect(
                try await store.infos(ids: nil, background: nil, session: nil).map(\.id) == [ids[1], ids[2], ids[0]]
            )
            _ = try await store.reorder([ids[0], ids[1]])
            #expect(
                try await store.infos(ids: nil, background: nil, session: nil).map(\.id) == [ids[0], ids[2], ids[1]]
            )
            await #expect(throws: HaulError.self) { _ = try await store.reorder([UUID()]) }

            try await store.setPriority(ids[2], 9)
            try await store.setRateLimit(777, for: [ids[1], ids[2]])
            let listed = try await store.infos(ids: nil, background: true, session: "a")
            #expect(listed.map(\.id) == [ids[0], ids[1]] && listed[1].rateLimit == 777)
            #expect(try await store.task(id: ids[2])?.priority == 9)
            #expect(try await store.infos(ids: nil, background: false, session: nil).isEmpty)
            #expect(
                try await store.tasks(inStates: [.queued, .retrying], background: nil).map(\.id) == [
                    ids[0], ids[2], ids[1],
                ]
            )

            try await store.delete(ids[1])
            #expect(try await store.task(id: ids[1]) == nil)
            #expect(try await store.segments(of: ids[1]).isEmpty)
        }
    }

    @Test(
        "limits and metered interfaces saved and read back; a kept value out of range is named and left out",
        arguments: StoreEngine.allCases
    )
    func settings(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withStore(temp) { store in
            #expect(try await store.storedLimits().limits == StoredLimits())
            try await store.saveLimits(StoredLimits(maxConcurrentDownloads: 4, overallRateLimit: 0))
            try await store.saveLimits(StoredLimits(maxDownloadsPerHost: 2, maxConnectionsPerHost: 12))
            #expect(
                try await store.storedLimits().limits
                    == StoredLimits(
                        maxConcurrentDownloads: 4,
                        maxDownloadsPerHost: 2,
                        maxConnectionsPerHost: 12,
                        overallRateLimit: 0
                    )
            )
            // Downloads per host keep the name stores written before connections had their
            // own limit used for them.
            try await store.saveNumericSettings([("maxConnectionsPerHost", 5)])
            #expect(try await store.storedLimits().limits.maxDownloadsPerHost == 5)
            #expect(try await store.storedLimits().limits.maxConnectionsPerHost == 12)
            try await store.saveNumericSettings([("maxConcurrentDownloads", 5000)])
            let (limits, rejected) = try await store.storedLimits()
            #expect(limits.maxConcurrentDownloads == nil && rejected == ["maxConcurrentDownloads = 5000"])
            #expect(try await store.storedMeteredInterfaces() == nil)
            try await store.saveMeteredInterfaces(["wwan*"])
            #expect(try await store.storedMeteredInterfaces() == ["wwan*"])
        }
    }

    @Test("two stores adding the same downloads at once record each once", arguments: StoreEngine.allCases)
    func racingAdds(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        func race(_ one: any TaskStore, _ two: any TaskStore) async throws {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for store in [one, two, one, two] {
                    group.addTask {
                        for index in 0..<20 {
                            _ = try await store.findOrInsert(
                                StoreRecords.record("http://h.test/\(index)", into: temp.path),
                                reAdd: StoreRecords.plainReAdd
                            ) { _ in }
                        }
                    }
                }
                try await group.waitForAll()
            }
            #expect(try await one.infos(ids: nil, background: nil, session: nil).count == 20)
        }
        switch engine {
        case .sqlite:
            let one = try await Store.opened(at: temp.file("race.sqlite"))
            let two = try await Store.opened(at: temp.file("race.sqlite"))
            try await race(one, two)
        case .postgres:
            try await engine.withPostgresStore { one, location in
                let two = try await PostgresStore.connect(to: location, logger: StoreEngine.logger)
                try await race(one, two)
                try await two.closeDatabase()
            }
        }
    }

    @Test(
        "segments no transfer could have written are refused in one sentence naming the task",
        arguments: StoreEngine.allCases
    )
    func hostileSegments(_ engine: StoreEngine) async throws {
        let temp = try TemporaryDirectory()
        try await engine.withStore(temp) { store in
            let task = try await store.findOrInsert(
                StoreRecords.record("http://h.test/x", into: temp.path),
                reAdd: StoreRecords.plainReAdd
            ) { _ in }.record
            // Two overlapping segments, as a damaged or hostile store could hold.
            try await store.checkpoint(
                task.id,
                segments: [
                    SegmentRecord(taskID: task.id, ordinal: 0, start: 0, end: 100, committed: 50),
                    SegmentRecord(taskID: task.id, ordinal: 1, start: 50, end: 200, committed: 60),
                ],
                sources: nil,
                verifiedPieces: nil,
                completing: false
            )
            let error = await #expect(throws: HaulError.self) { _ = try await store.taskForRun(task.id) }
            // A claim's read of it still reads the task: its run is the one told.
            let claimed = try await store.tasksForRun(ids: [task.id])
            #expect(claimed.map(\.task.id) == [task.id] && claimed.first.map { $0.segments == nil } == true)
            #expect(
                error?.message
                    == "Task \(task.id.shown) in the Haul store cannot be read: its segments are unusable (two segments overlap)"
            )
        }
    }
}
