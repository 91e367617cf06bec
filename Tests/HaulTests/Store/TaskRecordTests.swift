import Foundation
import GRDB
import HaulClient
import HaulTestSupport
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// The typed task record over its text columns, and the store's writers owning disjoint
/// groups of columns, on a real SQLite file.
@Suite("Task records", .timeLimit(.minutes(10)))
struct TaskRecordTests {
    /// A store on disk with one task, and a raw connection to the same file.
    private func withStore(
        _ body: (Store, TaskRecord, DatabaseQueue) async throws -> Void
    ) async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        let store = try Store(path: path)
        let record = TaskRecord(
            id: UUID(),
            url: URL(string: "https://user:pw@example.test/a%20b.bin?x=1")!,
            destination: .file(temp.file("a.bin")),
            explicitName: true,
            requestHeaders: [
                HTTPHeaderField(name: "Authorization", value: "Bearer t"), .init(name: "X-A", value: "1"),
            ],
            checksum: try Checksum(parsing: "sha256=" + String(repeating: "ab", count: 32)),
            overwrite: false,
            rateLimit: 1000,
            now: Date()
        )
        try await store.insert(record, segments: [SegmentRecord(taskID: record.id, ordinal: 0, start: 0, committed: 0)])
        let raw = try DatabaseQueue(path: path)
        try await body(store, record, raw)
        try raw.close()
        try store.closeDatabase()
    }

    @Test("a task reads back exactly as written: URL, headers, checksum and state typed, the columns plain text")
    func roundTrip() async throws {
        try await withStore { store, record, raw in
            let read = try #require(try await store.task(id: record.id))
            #expect(read.url == record.url)
            #expect(read.requestHeaders == record.requestHeaders)
            #expect(read.checksum == record.checksum)
            #expect(read.state == .queued)
            // The same TEXT columns as before the types: no migration.
            let row = try #require(
                try await raw.read { db in
                    try Row.fetchOne(db, sql: "SELECT url, requestHeaders, checksum, state FROM task")
                }
            )
            #expect(row["url"] as String == "https://user:pw@example.test/a%20b.bin?x=1")
            #expect(
                row["requestHeaders"] as String
                    == #"[{"name":"Authorization","value":"Bearer t"},{"name":"X-A","value":"1"}]"#
            )
            #expect(row["checksum"] as String == "sha256=" + String(repeating: "ab", count: 32))
            #expect(row["state"] as String == "queued")
        }
    }

    @Test("a task read by its columns' places is the task read by their names, every column holding a value")
    func readByPlace() async throws {
        try await withStore { store, record, raw in
            // Every column of its own value, so that one read from another's place shows.
            try await raw.write { db in
                try db.execute(
                    sql: """
                        UPDATE task SET finalURL = 'https://example.test/final', fileName = 'f.bin', etag = '"e1"',
                        lastModified = 'Tue, 01 Dec 2026 00:00:00 GMT', serverDate = 'Tue, 01 Dec 2026 00:00:01 GMT',
                        totalLength = 12345, errorMessage = 'an error', priority = 7, queueOrder = 42,
                        background = 1, connections = 3, minSplitSize = 1048576, partPath = '/tmp/p.part',
                        partIdentity = 'inode 9', nextTryAt = '2026-12-01 00:00:05.000',
                        retryingSince = '2026-12-01 00:00:02.000', allowsMetered = 0, checkNewer = 1,
                        continuesExisting = 1, maxConnectionsPerServer = 4, followsMetalink = 0, state = 'retrying'
                        WHERE id = ?
                        """,
                    arguments: [record.id]
                )
            }
            let byName = try #require(
                try await raw.read { db in
                    try TaskRecord.fetchOne(db, sql: "SELECT * FROM task WHERE id = ?", arguments: [record.id])
                }
            )
            #expect(byName.etag == "\"e1\"" && byName.maxConnectionsPerServer == 4 && !byName.followsMetalink)
            #expect(try await store.task(id: record.id) == byName)
            #expect(try await store.tasks(inStates: [.retrying], background: true, after: nil, limit: 10) == [byName])
            #expect(try await store.findTask(url: record.url, directory: record.directory, fileName: "f.bin") == byName)
        }
    }

    @Test("TLS options are stored as a JSON object, NULL for the defaults, and read back the same")
    func tlsRoundTrip() async throws {
        try await withStore { store, record, raw in
            let defaults = try await raw.read { db in try Row.fetchOne(db, sql: "SELECT tls FROM task") }
            #expect(try #require(defaults)["tls"] as String? == nil)
            let options = TLSOptions(certificateAuthorities: "/etc/ca.pem", verifiesCertificates: false)
            var changed = record
            changed.tls = options
            try await store.adopt(
                changed,
                segments: [SegmentRecord(taskID: record.id, ordinal: 0, start: 0, end: nil, committed: 0)]
            )
            #expect(try await store.task(id: record.id)?.tls == options)
            let text = try await raw.read { db in try Row.fetchOne(db, sql: "SELECT tls FROM task") }
            #expect(
                try #require(text)["tls"] as String?
                    == #"{"certificateAuthorities":"/etc/ca.pem","verifiesCertificates":false}"#
            )
        }
    }

    @Test(
        "a row Haul did not write is an error naming the task and the column, never a crash or a dropped value",
        arguments: [
            ("state", "'exploded'", "its state 'exploded' is not a state"),
            ("requestHeaders", "'not json'", "its requestHeaders is not a list of headers"),
            ("checksum", "'md7=zz'", "its checksum is not a checksum"),
            ("url", "'http://[not-a-host'", "its url is not a URL"),
            ("queueOrder", "'many'", "its queueOrder holds a value of the wrong type"),
            ("createdAt", "'yesterday'", "its createdAt is not a date"),
            ("tls", "'{\"certificateAuthorities\": 7}'", "its tls is not a set of TLS options"),
            ("tls", "'{\"certificateAuthorities\": \"relative/ca.pem\"}'", "its tls is not a set of TLS options"),
            (
                "sources", "'[{\"url\": \"file:///etc/passwd\", \"verified\": true, \"bytes\": 0}]'",
                "its sources is not a list of sources"
            ),
            (
                "sources", "'[{\"url\": \"http://127.0.0.1/f\", \"verified\": true, \"bytes\": -5}]'",
                "its sources is not a list of sources"
            ),
            (
                "maxConnectionsPerServer", "1000",
                "its maxConnectionsPerServer is not a number of connections from 1 to 64"
            ),
        ]
    )
    func unreadableRow(column: String, value: String, complaint: String) async throws {
        try await withStore { store, record, raw in
            try await raw.write { db in try db.execute(sql: "UPDATE task SET \(column) = \(value)") }
            let reads: [() async throws -> TaskRecord?] = [
                { try await store.task(id: record.id) }, { try await store.allTasks().first },
            ]
            for read in reads {
                let error = await expectHaulError(.store) { _ = try await read() }
                #expect(error?.message == "Task \(record.id.shown) in the Haul store cannot be read: \(complaint)")
            }
        }
    }

    @Test("a row whose id is not a task id is an error of one sentence that shows nothing of the row")
    func unreadableID() async throws {
        try await withStore { store, _, raw in
            try await raw.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA foreign_keys = OFF; UPDATE task SET id = 'not an id'")
            }
            let reads: [() async throws -> [TaskRecord]] = [
                { try await store.allTasks() },
                { try await store.tasks(inStates: [.queued], background: nil, after: nil, limit: nil) },
            ]
            for read in reads {
                let error = await expectHaulError(.store) { _ = try await read() }
                #expect(error?.message == "A task in the Haul store cannot be read: its id is not a task id")
                #expect(error.map { !"\($0)".contains("Bearer") } == true, "\(String(describing: error))")
            }
        }
    }

    @Test("the listing query refuses an unreadable state or URL by the task's id too")
    func unreadableListing() async throws {
        try await withStore { store, record, raw in
            try await raw.write { db in try db.execute(sql: "UPDATE task SET state = 'exploded'") }
            let error = await expectHaulError(.store) { _ = try await store.infos() }
            #expect(
                error?.message
                    == "Task \(record.id.shown) in the Haul store cannot be read: its state 'exploded' is not a state"
            )
        }
    }

    @Test("writers of different column groups never write back each other's stale values")
    func disjointWriters() async throws {
        try await withStore { store, record, _ in
            // A transfer holds `stale`, read before the scheduler paused the task and the
            // user changed its priority and limit.
            var stale = record
            try await store.setState(record.id, .paused)
            try await store.setPriority(record.id, 7)
            try await store.setRateLimit(5000, for: [record.id])
            stale.validators = Validators(etag: "\"v1\"", totalLength: 100)
            stale.fileName = "a.bin"
            let segments = [SegmentRecord(taskID: record.id, ordinal: 0, start: 0, end: 100, committed: 0)]
            try await store.saveResponse(stale, segments: segments)
            try await store.checkpoint(
                record.id,
                segments: [SegmentRecord(taskID: record.id, ordinal: 0, start: 0, end: 100, committed: 60)]
            )
            try await store.setPart(record.id, path: "/tmp/a.bin.part", identity: "1:2")

            let read = try #require(try await store.task(id: record.id))
            #expect(read.state == .paused)
            #expect(read.priority == 7)
            #expect(read.rateLimit == 5000)
            #expect(read.etag == "\"v1\"" && read.totalLength == 100)
            #expect(read.partPath == "/tmp/a.bin.part")
            #expect(try await store.segments(of: record.id).map(\.committed) == [60])

            // A state change leaves the response and the part file alone.
            try await store.setState(record.id, .failed, error: "boom")
            let after = try #require(try await store.task(id: record.id))
            #expect(after.etag == "\"v1\"" && after.partPath == "/tmp/a.bin.part" && after.errorMessage == "boom")
        }
    }

    @Test(
        "segments no transfer could have written are refused by the task's id, before any arithmetic on them",
        arguments: [
            ("UPDATE segment SET committed = -5", "a segment is inverted"),
            ("UPDATE segment SET \"end\" = 100, committed = 500", "a segment overruns its end"),
            (
                "INSERT INTO segment (taskID, ordinal, start, \"end\", committed) SELECT taskID, 1, 10, 20, 0 FROM segment",
                "a segment without an end is not the last"
            ),
        ]
    )
    func unusableSegments(sql: String, problem: String) async throws {
        try await withStore { store, record, raw in
            try await raw.write { db in try db.execute(sql: sql) }
            let expected =
                "Task \(record.id.shown) in the Haul store cannot be read: its segments are unusable (\(problem))"
            let viaTask = await expectHaulError(.store) { _ = try await store.taskWithSegments(record.id) }
            #expect(viaTask?.message == expected)
            let viaSegments = await expectHaulError(.store) { _ = try await store.segments(of: record.id) }
            #expect(viaSegments?.message == expected)
        }
    }

    @Test("a checkpoint leaves exactly the segments it is given: more, fewer, a row gone missing, numbers with a gap")
    func replacedSegments() async throws {
        try await withStore { store, record, raw in
            func plan(_ bounds: [(start: Int64, end: Int64, committed: Int64)]) -> [SegmentRecord] {
                bounds.enumerated().map { ordinal, bound in
                    SegmentRecord(
                        taskID: record.id,
                        ordinal: ordinal,
                        start: bound.start,
                        end: bound.end,
                        committed: bound.committed
                    )
                }
            }
            let three = plan([(0, 40, 10), (40, 80, 50), (80, 100, 90)])
            try await store.checkpoint(record.id, segments: three)
            #expect(try await store.segments(of: record.id) == three)
            let two = plan([(0, 50, 50), (50, 100, 70)])
            try await store.checkpoint(record.id, segments: two)
            #expect(try await store.segments(of: record.id) == two)
            try await raw.write { db in try db.execute(sql: "DELETE FROM segment WHERE ordinal = 0") }
            let later = plan([(0, 50, 50), (50, 100, 90)])
            try await store.checkpoint(record.id, segments: later)
            #expect(try await store.segments(of: record.id) == later)
            // Segments not numbered 0, 1, 2… (a store written by something else) are written
            // back as they are, none dropped for its number.
            try await raw.write { db in try db.execute(sql: "UPDATE segment SET ordinal = 5 WHERE ordinal = 1") }
            let gapped = try await store.segments(of: record.id)
            #expect(gapped.map(\.ordinal) == [0, 5])
            try await store.checkpoint(record.id, segments: gapped)
            #expect(try await store.segments(of: record.id) == gapped)
        }
    }

    @Test("a task whose segment rows are gone starts from byte 0 instead of failing")
    func missingSegments() async throws {
        try await withStore { store, record, raw in
            try await raw.write { db in try db.execute(sql: "DELETE FROM segment") }
            let segments = try await store.segments(of: record.id)
            #expect(segments == [SegmentRecord(taskID: record.id, ordinal: 0, start: 0, committed: 0)])
        }
    }
}
