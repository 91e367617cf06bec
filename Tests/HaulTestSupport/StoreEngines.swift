import Foundation
import Haul
import HaulDaemon
import HaulPostgres
import Logging
import PostgresNIO
import Synchronization
import Testing

/// The store engines a suite runs on: the embedded SQLite store, and fleet mode's
/// PostgreSQL store (on the suite's own server, ``PostgresServer/current``).
package enum StoreEngine: String, CaseIterable, CustomTestStringConvertible, Sendable {
    case sqlite, postgres

    package var testDescription: String { rawValue }

    /// Runs `body` with a new, empty store of this engine: a SQLite file in `temp`, or a new
    /// database on the suite's PostgreSQL server (`body` is not run, and the case passes
    /// with a note, when there is none outside CI; in CI its absence already failed the suite).
    package func withStore(_ temp: TemporaryDirectory, _ body: (any TaskStore) async throws -> Void) async throws {
        switch self {
        case .sqlite:
            let store = try await Store.opened(at: temp.file("store-\(UUID().uuidString.prefix(8)).sqlite"))
            try await store.migrateEventLog()  // The daemon's tables, as a daemon's store has them.
            try await body(store)
            try store.closeDatabase()
        case .postgres:
            try await withPostgresStore { store, _ in try await body(store) }
        }
    }

    /// A location for a downloader or manager: the SQLite file `name` in `temp` (the same
    /// name is the same store), or a new PostgreSQL database.
    package func withLocation(
        _ temp: TemporaryDirectory,
        _ name: String = "s.sqlite",
        _ body: (Downloader.StoreLocation) async throws -> Void
    ) async throws {
        switch self {
        case .sqlite: try await body(.sqlite(at: temp.file(name)))
        case .postgres: try await withPostgresStore { store, _ in try await body(.postgres(store)) }
        }
    }

    /// A daemon's shared store: nil for SQLite (the daemon's own, in its home); for
    /// PostgreSQL, a store on the database kept for `home` — created with the first daemon
    /// of that home, so a daemon restarted on the same home finds what the last one left.
    /// Throws when there is no PostgreSQL server (a suite run on PostgreSQL has
    /// `.postgresServer`, which fails in CI without one).
    package func daemonStore(home: String) async throws -> PostgresStore? {
        guard self == .postgres else { return nil }
        guard let server = PostgresServer.current else {
            throw HaulError(.store, "PostgreSQL is not installed: cannot run this daemon test on it")
        }
        let existing = Self.daemonDatabases.withLock { $0[home] }
        let location: PostgresLocation
        if let existing {
            location = existing
        } else {
            location = try await server.newDatabase()
            Self.daemonDatabases.withLock { $0[home] = location }
        }
        return try await PostgresStore.connect(to: location, node: "test", logger: Self.logger)
    }

    /// Runs `body` with the store of a daemon's `home` while no daemon has it open, as an
    /// operator's hand (or another program) would: its SQLite file, or its PostgreSQL database.
    package func withDaemonStore(home: String, _ body: (any TaskStore) async throws -> Void) async throws {
        switch self {
        case .sqlite:
            let store = try await Store.opened(at: home + "/haul.sqlite")
            try await store.migrateEventLog()
            try await body(store)
            try store.closeDatabase()
        case .postgres:
            guard let store = try await daemonStore(home: home) else { return }
            do {
                try await body(store)
                try await store.closeDatabase()
            } catch {
                try? await store.closeDatabase()
                throw error
            }
        }
    }

    /// The database of each daemon home that ran on PostgreSQL.
    private static let daemonDatabases = Mutex<[String: PostgresLocation]>([:])

    /// A PostgreSQL store on a new database of the suite's server, and the database's location
    /// (for a second store on the same database, as another node would open).
    package func withPostgresStore(_ body: (PostgresStore, PostgresLocation) async throws -> Void) async throws {
        guard let server = PostgresServer.current else {
            if !ExternalServer.isCI { print("note: PostgreSQL is not installed; the PostgreSQL case did nothing") }
            return
        }
        let location = try await server.newDatabase()
        let store = try await PostgresStore.connect(to: location, logger: Self.logger)
        do {
            try await body(store, location)
            try await store.closeDatabase()
        } catch {
            try? await store.closeDatabase()
            throw error
        }
    }

    package static var logger: Logger { debugLogger(label: "haul.store.test", level: .info) }
}

/// Starts one PostgreSQL server for a whole suite (`@Suite(.postgresServer)`), seen by its
/// tests as ``PostgresServer/current``, and stops it when the suite ends. Without PostgreSQL
/// installed the suite still runs (outside CI), with no server.
package struct PostgresServerScope: SuiteTrait, TestScoping {
    package func provideScope(
        for test: Test,
        testCase: Test.Case?,
        performing function: @Sendable () async throws -> Void
    ) async throws {
        guard let server = try await PostgresServer.start() else {
            try await function()
            return
        }
        do {
            try await PostgresServer.$current.withValue(server) { try await function() }
            await server.stop()
        } catch {
            await server.stop()
            throw error
        }
    }
}

extension Trait where Self == PostgresServerScope {
    /// One PostgreSQL server for the suite.
    package static var postgresServer: Self { Self() }
}

extension PostgresServer {
    @TaskLocal package static var current: PostgresServer?

    /// A new database on this server, and where it is.
    package func newDatabase() async throws -> PostgresLocation {
        let name = "t_\(UUID().uuidString.prefix(12).lowercased().replacingOccurrences(of: "-", with: ""))"
        try await withClient(database: "postgres") { admin in
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \(name)"))
        }
        return try PostgresLocation(parsing: "postgres://\(Self.user)@127.0.0.1:\(port)/\(name)?sslmode=disable")
    }
}
