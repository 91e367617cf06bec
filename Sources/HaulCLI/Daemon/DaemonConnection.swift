import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulWire
import HaulWireMapping

/// Finds the daemon of this `HAUL_HOME`, starting it in the background when none runs.
enum DaemonConnection {
    /// A client of a daemon that answers.
    /// - Parameter autoStart: start a daemon when none runs (telling the user once), instead
    ///   of failing.
    static func connect(autoStart: Bool = true) async throws -> HaulClient {
        let home = HaulHome.resolve()
        let paths = DaemonPaths(home: home)
        let client = HaulClient(home: home)
        if (try? await client.health(timeout: .seconds(5))) != nil { return client }
        var started: StartedDaemon?
        let running = DaemonLock.holder(paths.lock) != nil
        if !running {
            guard autoStart else {
                try? await client.shutdown()
                throw HaulError(
                    .connection,
                    "No Haul daemon is running for \(home.path)",
                    hint: "Start it with 'haul daemon'"
                )
            }
        }
        do {
            if !running { started = try start(paths) }
            // Starting (by us or by another command): wait until it answers.
            try await waitUntilAnswering(client, paths, started: started)
        } catch {
            try? await client.shutdown()
            throw error
        }
        // Several commands may start one together; only the one whose daemon won says so.
        if let started, DaemonLock.holder(paths.lock) == started.pid {
            CLIError.note("haul: started the daemon (pid \(started.pid); log: \(paths.log))")
        }
        return client
    }

    /// A daemon process this command started.
    struct StartedDaemon {
        let process: ChildProcess
        var pid: Int32 { process.pid }
        /// Where its lines begin in the log (earlier starts wrote what comes before).
        let logOffset: UInt64
    }

    /// Waits up to 15 s for the daemon to answer (with `listening`, on its TCP listener too);
    /// gives up early when `started` (the daemon just started) has exited.
    static func waitUntilAnswering(
        _ client: HaulClient,
        _ paths: DaemonPaths,
        started: StartedDaemon?,
        listening: Bool = false
    ) async throws {
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline {
            if let health = try? await client.health(timeout: .seconds(1)), !listening || health.listen != nil {
                return
            }
            if let started, !started.process.isRunning, DaemonLock.holder(paths.lock) == nil {
                // It ended: its error line says why (it cannot listen, the store is not Haul's…).
                if let reason = lastError(inLog: paths.log, from: started.logOffset) {
                    throw HaulError(
                        .connection,
                        "The Haul daemon did not start: \(reason)",
                        hint: "See its log: \(paths.log)"
                    )
                }
                break
            }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw HaulError(
            .connection,
            "The Haul daemon did not answer on \(paths.socket)",
            hint: "See its log: \(paths.log)"
        )
    }

    /// The last error a daemon that failed to start printed into its log after `offset`.
    /// Not necessarily the last line: the server library may log its own shutdown after it.
    private static func lastError(inLog path: String, from offset: UInt64) -> String? {
        guard let descriptor = try? HomeFile.open(path, O_RDONLY) else { return nil }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        let size = (try? handle.seekToEnd()) ?? 0
        try? handle.seek(toOffset: max(offset, size > 65_536 ? size - 65_536 : 0))
        guard let data = try? handle.readToEnd() else { return nil }
        let prefix = "haul: error: "
        let line = String(decoding: data, as: UTF8.self).split(separator: "\n").last { $0.hasPrefix(prefix) }
        return line.map { String($0.dropFirst(prefix.count)) }
    }

    /// Starts `haul daemon` detached from this terminal, logging to `daemon.log`.
    /// - Parameter environment: variables added to the daemon's environment (a secret goes
    ///   there, never among the arguments any user can list).
    static func start(
        _ paths: DaemonPaths,
        arguments: [String] = [],
        environment: [String: String] = [:]
    ) throws -> StartedDaemon {
        try HaulHome.createDirectory(paths.home.path)
        let logDescriptor = try HomeFile.open(paths.log, O_WRONLY | O_CREAT | O_APPEND)
        let log = FileHandle(fileDescriptor: logDescriptor, closeOnDealloc: true)
        let logOffset = (try? log.seekToEnd()) ?? 0
        let child: ChildProcess
        do {
            // In a session of its own, so the terminal's hang-up or Ctrl-C does not reach it.
            child = try ChildProcess(
                executablePath(),
                arguments: ["daemon", "start", "--foreground", "--detach"] + arguments,
                environment: environment.isEmpty
                    ? nil : ProcessInfo.processInfo.environment.merging(environment) { _, added in added },
                standardInput: .null,
                standardOutput: .descriptor(logDescriptor),
                standardError: .descriptor(logDescriptor),
                newSession: true
            )
        } catch {
            throw HaulError(.fileSystem, "Cannot start the Haul daemon", underlying: error)
        }
        return StartedDaemon(process: child, logOffset: logOffset)
    }

    /// This program, to run as the daemon.
    private static func executablePath() -> String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments[0]
    }
}
