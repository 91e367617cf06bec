import Foundation
import Haul
import Logging
import PostgresNIO
import Synchronization
import Testing

/// A real PostgreSQL server (Debian's `postgresql`) for a test: `initdb` into a temporary
/// directory as an unprivileged user (PostgreSQL refuses to run as root), listening on a
/// free loopback port only, with durability switched off (tests throw the data away), and
/// stopped by its process id afterwards.
package final class PostgresServer: Sendable {
    package let port: Int
    private let directory: TemporaryDirectory
    /// The running postmaster's process; another after ``restart()``.
    private let process: Mutex<ChildProcess>
    /// How to start it again: its programs, and the command prefix that runs them as `account`.
    private let bin: String
    private let prefix: [String]
    package static let user = "haul"

    /// The newest PostgreSQL's programs, or nil when none is installed.
    package static var binaries: String? {
        let root = "/usr/lib/postgresql"
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: root)) ?? [])
            .compactMap(Int.init).sorted()
        return versions.reversed().map { "\(root)/\($0)/bin" }
            .first { FileManager.default.isExecutableFile(atPath: "\($0)/initdb") }
    }

    /// Who runs the server when the tests run as root: Debian's `postgres` account, else `nobody`.
    private static var account: String? {
        guard getuid() == 0 else { return nil }
        return getpwnam("postgres") != nil ? "postgres" : "nobody"
    }

    private init(port: Int, directory: TemporaryDirectory, process: ChildProcess, bin: String, prefix: [String]) {
        self.port = port
        self.directory = directory
        self.process = Mutex(process)
        self.bin = bin
        self.prefix = prefix
    }

    /// Starts a server; nil (a recorded failure in CI) when PostgreSQL is not installed.
    package static func start() async throws -> PostgresServer? {
        guard let bin = binaries else {
            if ExternalServer.isCI { Issue.record("PostgreSQL is not installed (.ci/run installs postgresql)") }
            return nil
        }
        let directory = try TemporaryDirectory()
        chmod(directory.path, 0o755)
        for path in [directory.file("data"), directory.file("run")] {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
            if let account, let entry = getpwnam(account) { chown(path, entry.pointee.pw_uid, entry.pointee.pw_gid) }
        }
        let prefix = account.map { ["/usr/sbin/runuser", "-u", $0, "--"] } ?? []
        let initdb =
            prefix + [
                "\(bin)/initdb", "-D", directory.file("data"), "-U", user, "-A", "trust", "-E", "UTF8", "--no-sync",
                "--no-instructions",
            ]
        let (status, output) = try await Command.run(initdb[0], Array(initdb.dropFirst()))
        guard status == 0 else { throw HaulError(.store, "initdb failed: \(output.suffix(2000))") }

        // A free port can be taken by another test between the check and the bind: then
        // the server exits at once, and another port is tried.
        for _ in 1...3 {
            let port = try LoopbackPort.free()
            if let process = try await launch(bin: bin, prefix: prefix, directory: directory, port: port) {
                return PostgresServer(port: port, directory: directory, process: process, bin: bin, prefix: prefix)
            }
        }
        let log = (try? String(contentsOfFile: directory.file("server.log"), encoding: .utf8)) ?? ""
        throw HaulError(.store, "PostgreSQL did not start: \(log.suffix(2000))")
    }

    /// Starts the postmaster on `port`; nil when it exited before it was ready.
    private static func launch(
        bin: String,
        prefix: [String],
        directory: TemporaryDirectory,
        port: Int
    ) async throws -> ChildProcess? {
        let command =
            prefix + [
                "\(bin)/postgres", "-D", directory.file("data"), "-p", "\(port)", "-k", directory.file("run"),
                "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off", "-c", "synchronous_commit=off",
                "-c", "full_page_writes=off", "-c", "max_connections=200",
            ]
        let process = try ChildProcess(
            command[0],
            arguments: Array(command.dropFirst()),
            standardOutput: .file(directory.file("server.log"), append: true),
            standardError: .file(directory.file("server.log"), append: true)
        )
        // Ready when pg_isready says it accepts connections (not merely that it listens).
        let ready = try await waitUntil(timeout: .seconds(60), every: .milliseconds(50)) {
            guard process.isRunning else { return true }
            return try await Command.run("\(bin)/pg_isready", ["-q", "-h", "127.0.0.1", "-p", "\(port)"]).status == 0
        }
        guard ready, process.isRunning else {
            await stop(process, directory: directory)
            return nil
        }
        return process
    }

    /// Starts the stopped server again, on its port and data (as after an outage).
    package func restart() async throws {
        guard let process = try await Self.launch(bin: bin, prefix: prefix, directory: directory, port: port) else {
            let log = (try? String(contentsOfFile: directory.file("server.log"), encoding: .utf8)) ?? ""
            throw HaulError(.store, "PostgreSQL did not start again: \(log.suffix(2000))")
        }
        self.process.withLock { $0 = process }
    }

    /// Runs `body` with a started server (skipped when there is none, outside CI), then stops it.
    package static func with(_ body: (PostgresServer) async throws -> Void) async throws {
        guard let server = try await start() else { return }
        do {
            try await body(server)
            await server.stop()
        } catch {
            await server.stop()
            throw error
        }
    }

    /// A fast shutdown (SIGINT to the postmaster, whose id its pid file holds), waited for.
    package func stop() async {
        await Self.stop(process.withLock { $0 }, directory: directory)
    }

    private static func stop(_ process: ChildProcess, directory: TemporaryDirectory) async {
        guard process.isRunning else { return }
        let pidFile = directory.file("data/postmaster.pid")
        if let text = try? String(contentsOfFile: pidFile, encoding: .utf8),
            let pid = text.split(separator: "\n").first.flatMap({ Int32($0) }), pid > 0
        {
            kill(pid, SIGINT)
        } else {
            process.signal(SIGINT)
        }
        if await process.exited(within: .seconds(30)) == nil {
            process.signal(SIGKILL)
            _ = await process.exited()
        }
    }

    /// Creates a database and runs `body` with a client of it (its pool running meanwhile).
    package func withDatabase(_ name: String, _ body: (PostgresClient) async throws -> Void) async throws {
        try await withClient(database: "postgres") { admin in
            try await admin.query(PostgresQuery(unsafeSQL: "CREATE DATABASE \"\(name)\""))
        }
        try await withClient(database: name, body)
    }

    /// A client of `database`, its pool running while `body` runs.
    package func withClient(database: String, _ body: (PostgresClient) async throws -> Void) async throws {
        let configuration = PostgresClient.Configuration(
            host: "127.0.0.1",
            port: port,
            username: Self.user,
            password: nil,
            database: database,
            tls: .disable
        )
        var logger = Logger(label: "haul.postgres.test")
        logger.logLevel = .error
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await client.run() }
            defer { group.cancelAll() }
            try await body(client)
        }
    }
}
