import Foundation
import GRDB
import HaulTestSupport
import Testing

@testable import Haul

/// How a new store comes to be: built whole under a temporary name, then renamed into place,
/// already in the mode every opening uses.
@Suite("A new store", .timeLimit(.minutes(1)))
struct StoreCreationTests {
    @Test(
        "is created whole and in WAL mode: every migration recorded, nothing left beside it, no switch at its first opening"
    )
    func createdWholeInWALMode() throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        // A crash's leftovers from an earlier creation are made again, not used.
        try Data("half".utf8).write(to: URL(fileURLWithPath: path + ".new"))
        try Data("stale".utf8).write(to: URL(fileURLWithPath: path + ".new-journal"))
        try Store.create(at: path, configuration: Configuration())
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
}
