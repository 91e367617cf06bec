import Foundation
import GRDB
import HaulDaemon
import HaulTestSupport
import HaulWire
import Testing

@testable import Haul

/// The daemon keeps its own tables' migrations (EventLogSchema): the store's own make none
/// of the daemon's tables, a store migrated before keeps its log, and each side refuses only
/// what a newer Haul of its own did.
@Suite("The daemon's tables in a SQLite store", .timeLimit(.minutes(1)))
struct EventLogSchemaTests {
    static func tables(_ store: Store) throws -> Set<String> {
        try store.writer.read { db in
            try Set(String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table'"))
        }
    }

    static func event(session: String = "s") -> EventRecord {
        EventRecord(taskID: nil, kind: .network, session: session)
    }

    @Test("a new store has no daemon tables until the daemon migrates it; then its log takes events")
    func newStore() async throws {
        let temp = try TemporaryDirectory()
        let store = try await Store.opened(at: temp.file("s.sqlite"))
        #expect(try Self.tables(store).isDisjoint(with: ["event", "session"]))
        await #expect(throws: (any Error).self) { try await store.appendEvents([Self.event()]) }
        try await store.migrateEventLog()
        try await store.migrateEventLog()  // Once is enough: the second finds it done.
        #expect(try Self.tables(store).isSuperset(of: ["event", "session"]))
        let logged = try await store.appendEvents([Self.event()])
        #expect(logged.count == 1)
        #expect(try await store.loggedEvents(session: "s", after: 0).map(\.eventID) == logged.map(\.eventID))
    }

    @Test("a store whose log the store's own migrations made keeps its events")
    func storeMigratedBefore() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("s.sqlite")
        do {
            // As v3 and v14 left it before the daemon kept its own migrations, with an event in it.
            let store = try await Store.opened(at: path)
            try await store.writer.write { db in
                try db.execute(
                    sql: """
                        CREATE TABLE event (id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL,
                            payload TEXT NOT NULL, createdAt DATETIME NOT NULL);
                        CREATE INDEX event_on_session_id ON event(session, id);
                        CREATE TABLE session (name TEXT PRIMARY KEY, acknowledged INTEGER NOT NULL DEFAULT 0);
                        INSERT INTO event (session, payload, createdAt)
                            VALUES ('s', '{"event":"network","session":"s"}', '2026-11-25 00:00:00.000');
                        """
                )
            }
            try store.closeDatabase()
        }
        let store = try await Store.opened(at: path)
        try await store.migrateEventLog()
        #expect(try await store.loggedEvents(session: "s", after: 0).map(\.eventID) == [1])
        #expect(try await store.appendEvents([Self.event()]).map(\.eventID) == [2])
    }

    @Test(
        "a newer Haul's daemon migration: the daemon refuses the store, a download does not; a newer store's own: both do"
    )
    func newerMigrations() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("s.sqlite")
        do {
            let store = try await Store.opened(at: path)
            try await store.migrateEventLog()
            try await store.writer.write { db in
                try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('daemon v99: from the future')")
            }
            try store.closeDatabase()
        }
        let store = try await Store.opened(at: path)  // `haul get` still uses it.
        await #expect {
            try await store.migrateEventLog()
        } throws: { error in
            (error as? HaulError)?.message == "The Haul store was written by a newer version of Haul"
        }
        try await store.writer.write { db in
            try db.execute(sql: "INSERT INTO grdb_migrations (identifier) VALUES ('v99: from the future')")
        }
        try store.closeDatabase()
        #expect {
            _ = try Store(path: path)
        } throws: { error in
            (error as? HaulError)?.message == "The Haul store was written by a newer version of Haul"
        }
    }
}
