import Foundation
import GRDB
import HaulTestSupport
import Testing

@testable import Haul

/// How a new store comes to be: built whole under a temporary name, then renamed into place,
/// already in the mode every opening uses.
@Suite("A new store", .timeLimit(.minutes(1)))
struct StoreCreationTests {
    /// A task for the file `name` in `temp`.
    private static func record(_ name: String, in temp: TemporaryDirectory) -> TaskRecord {
        TaskRecord(
            id: UUID(),
            url: URL(string: "https://example.test/\(name)")!,
            destination: .file(temp.file(name)),
            explicitName: true,
            requestHeaders: [],
            checksum: nil,
            overwrite: false,
            rateLimit: nil,
            now: Date()
        )
    }

    @Test(
        "is created whole and in WAL mode: every migration recorded, nothing left beside it, no switch at its first opening"
    )
    func createdWholeInWALMode() throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        // A crash's leftovers from an earlier creation are made again, not used.
        try Data("half".utf8).write(to: URL(fileURLWithPath: path + ".new"))
        try Data("stale".utf8).write(to: URL(fileURLWithPath: path + ".new-journal"))
        try Store.create(at: path)
        #expect(try FileManager.default.contentsOfDirectory(atPath: temp.path) == ["haul.sqlite"])
        // SQLite's header says WAL (bytes 18 and 19 are 2; 1 for a rollback journal): the
        // first opening finds the mode set and makes no journal to switch it.
        let header = try #require(FileHandle(forReadingAtPath: path)).readData(ofLength: 20)
        #expect(Array(header.suffix(2)) == [2, 2])
        let database = try DatabaseQueue(path: path)
        defer { try? database.close() }
        let (applied, journal) = try database.read { db in
            (try Store.migrator.appliedIdentifiers(db), try String.fetchOne(db, sql: "PRAGMA journal_mode"))
        }
        #expect(Set(applied) == Set(Store.migrator.migrations))
        #expect(journal == "wal")
    }

    @Test(
        "an existing file is known by its header: Haul's application id opens it at once; other SQLite files are asked; others are not SQLite"
    )
    func knownByItsHeader() throws {
        let temp = try TemporaryDirectory()
        let store = temp.file("haul.sqlite")
        try Store.create(at: store)
        #expect(try Store.header(of: store) == .haulStore)

        let other = temp.file("other.sqlite")
        let database = try DatabaseQueue(path: other)
        try database.write { try $0.execute(sql: "CREATE TABLE notes (body TEXT)") }
        #expect(try Store.header(of: other) == .otherSQLite)
        try database.write { try $0.execute(sql: "PRAGMA application_id = \(Store.applicationID)") }
        try database.close()
        #expect(try Store.header(of: other) == .haulStore)

        let text = temp.file("text")
        try String(repeating: "not SQLite ", count: 20).write(toFile: text, atomically: false, encoding: .utf8)
        #expect(try Store.header(of: text) == .notSQLite)
        let short = temp.file("short")
        try Data("SQLite format 3\0".utf8).write(to: URL(fileURLWithPath: short))
        #expect(try Store.header(of: short) == .notSQLite)
    }

    @Test("a store from before the application id (its first migration recorded, id 0) still opens: SQLite is asked")
    func storeBeforeTheApplicationIDOpens() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        try Store.create(at: path)
        let database = try DatabaseQueue(path: path)
        try await database.writeWithoutTransaction { try $0.execute(sql: "PRAGMA application_id = 0") }
        try database.close()
        #expect(try Store.header(of: path) == .otherSQLite)
        let store = try Store(path: path)
        #expect(try await store.allTasks().isEmpty)
        try store.closeDatabase()
    }

    @Test(
        "a connection closed without closeDatabase (a haul get's exit) leaves its WAL, which the next opening reads; closeDatabase still folds it in"
    )
    func walKeptAtClose() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        for readers in [Store.Readers.serial, .concurrent] {
            let store = try Store(path: path, readers: readers)
            _ = try await store.insert(Self.record("\(readers).bin", in: temp), segments: [])
            // GRDB's own close, as at a process's end: SQLite would fold the WAL in and remove it.
            try store.writer.close()
            #expect(fileSize(path + "-wal") > 0, "\(readers): the WAL was folded in at close")
        }
        let again = try Store(path: path, readers: .serial)
        #expect(try await again.allTasks().count == 2)
        try again.closeDatabase()
        #expect(fileSize(path + "-wal") == 0)
        let copy = temp.file("copy.sqlite")
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        let count = try await DatabaseQueue(path: copy).read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM task") }
        #expect(count == 2, "the file alone holds both after closeDatabase")
    }

    @Test(
        "read in turn (haul get's way), a store opens on one connection and writes only an empty WAL's header; each process sees the other's writes; a clean close folds the WAL in"
    )
    func readInTurn() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        try Store.create(at: path)
        func task(_ name: String) -> TaskRecord { Self.record(name, in: temp) }
        let serial = try Store(path: path, readers: .serial)
        #expect(try await serial.allTasks().isEmpty)
        // The empty WAL given its header (and one page that changed nothing) at the opening,
        // not at the first add a download waits for; a WAL already begun is left as it is.
        let begun = fileSize(path + "-wal")
        #expect(begun > 0)
        let again = try Store(path: path, readers: .serial)
        #expect(fileSize(path + "-wal") == begun, "a second opening writes nothing")
        try again.writer.close()
        let pooled = try Store(path: path)

        let first = try await pooled.insert(task("a.bin"), segments: [])
        #expect(try await serial.allTasks().map(\.id) == [first.id])
        let second = try await serial.insert(task("b.bin"), segments: [])
        #expect(try await pooled.allTasks().map(\.id) == [first.id, second.id])

        try serial.closeDatabase()
        try pooled.closeDatabase()
        #expect(fileSize(path + "-wal") == 0)
        // The database file alone holds both.
        let copy = temp.file("copy.sqlite")
        try FileManager.default.copyItem(atPath: path, toPath: copy)
        let count = try await DatabaseQueue(path: copy).read { try Int.fetchOne($0, sql: "SELECT COUNT(*) FROM task") }
        #expect(count == 2)
    }

    /// A new store made by SQLite, as Haul made it before it wrote ``StoreImage``: the schema's
    /// statements in one transaction with no journal file and no syncs, then WAL mode set.
    private static func madeBySQLite(at path: String) throws -> [UInt8] {
        var configuration = Configuration()
        configuration.prepareDatabase { db in
            try db.execute(sql: "PRAGMA synchronous = OFF")
            try db.execute(sql: "PRAGMA journal_mode = MEMORY")
        }
        let database = try DatabaseQueue(path: path, configuration: configuration)
        try database.writeWithoutTransaction { try StoreSchema.create(in: $0, migrations: Store.migrator.migrations) }
        try database.writeWithoutTransaction { _ = try String.fetchOne($0, sql: "PRAGMA journal_mode = WAL") }
        try database.close()
        return Array(try Data(contentsOf: URL(fileURLWithPath: path)))
    }

    @Test("is written from an image that is the file SQLite makes of the schema, and SQLite finds it sound")
    func imageIsTheSchema() async throws {
        let temp = try TemporaryDirectory()
        let made = try Self.madeBySQLite(at: temp.file("made.sqlite"))
        let image = try #require(StoreImage.bytes)
        // Bytes 92 to 99 say which version of SQLite wrote the file, and when: not the schema.
        func schemaBytes(_ bytes: [UInt8]) -> [UInt8] {
            bytes.enumerated().map { 92..<100 ~= $0.offset ? 0 : $0.element }
        }
        #expect(
            schemaBytes(image) == schemaBytes(made),
            "The schema changed: StoreImage.swift should say\n\(StoreImageSource.text(for: made))"
        )
        let path = temp.file("haul.sqlite")
        try Store.create(at: path)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == Data(image))
        let database = try DatabaseQueue(path: path)
        #expect(try await database.read { try String.fetchOne($0, sql: "PRAGMA integrity_check") } == "ok")
        try database.close()
    }

    @Test(
        "is made at exactly the schema the migrations leave, SQLite's text and order, the application id, every migration recorded"
    )
    func schemaIsTheMigrations() throws {
        let migrated = try DatabaseQueue()
        try Store.migrator.migrate(migrated)
        let created = try DatabaseQueue()
        try created.writeWithoutTransaction { try StoreSchema.create(in: $0, migrations: Store.migrator.migrations) }
        func schema(_ database: DatabaseQueue) throws -> [String] {
            try database.read { db in
                try Row.fetchAll(db, sql: "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY rowid")
                    .map { "\($0)" }
                    + [try String.fetchOne(db, sql: "PRAGMA application_id") ?? ""]
                    + (try Store.migrator.appliedIdentifiers(db)).sorted()
            }
        }
        let statements = try migrated.read { db in
            try String.fetchAll(db, sql: "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY rowid")
        }
        #expect(
            try schema(created) == schema(migrated),
            "A migration changed the schema: StoreSchema.statements should be\n\(statements.map { "\($0.debugDescription)," }.joined(separator: "\n"))"
        )
        #expect(try created.read { try Store.migrator.hasCompletedMigrations($0) })
        #expect(try created.read { try Store.migrator.appliedIdentifiers($0) }.count == Store.migrator.migrations.count)
    }
}
