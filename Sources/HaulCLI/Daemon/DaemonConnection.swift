import Foundation
import Haul
import HaulDaemon

/// Finds the daemon of this `HAUL_HOME`, starting it in the background when none runs.
enum DaemonConnection {
    /// A client of a daemon that answers.
    /// - Parameter autoStart: start a daemon when none runs (telling the user once), instead
    ///   of failing.
    static func connect(autoStart: Bool = true) async throws -> HaulClient {
        let home = HaulHome.resolve()
        let paths = DaemonPaths(home: home)
        let client = HaulClient(home: home)
        if (try? await client.status(timeout: .seconds(5))) != nil { return client }
        var started: Int32?
        if DaemonLock.holder(paths.lock) == nil {
            guard autoStart else {
                try? await client.shutdown()
                throw HaulError(
                    .connection,
                    "No Haul daemon is running for \(home.path)",
                    hint: "Start it with 'haul daemon'"
                )
            }
            started = try start(paths)
        }
        do {
            // Starting (by us or by another command): wait until it answers.
            try await waitUntilAnswering(client, paths, pid: started)
        } catch {
            try? await client.shutdown()
            throw error
        }
        // Several commands may start one together; only the one whose daemon won says so.
        if let started, DaemonLock.holder(paths.lock) == started {
            CLIError.note("haul: started the daemon (pid \(started); log: \(paths.log))")
        }
        return client
    }

    /// Waits up to 15 s for the daemon to answer; gives up early when `pid` (the daemon just
    /// started) has exited.
    static func waitUntilAnswering(_ client: HaulClient, _ paths: DaemonPaths, pid: Int32?) async throws {
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline {
            if (try? await client.status(timeout: .seconds(1))) != nil { return }
            if let pid, kill(pid, 0) != 0, DaemonLock.holder(paths.lock) == nil {
                // It ended: its last line says why (it cannot listen, the store is not Haul's…).
                if let reason = lastError(inLog: paths.log) {
                    throw HaulError(.connection, "The Haul daemon did not start: \(reason)", hint: "See its log: \(paths.log)")
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

    /// The error a daemon that failed to start printed last into its log, if it was the
    /// log's last line.
    private static func lastError(inLog path: String) -> String? {
        guard let descriptor = try? HomeFile.open(path, O_RDONLY) else { return nil }
        let handle = FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
        let size = (try? handle.seekToEnd()) ?? 0
        try? handle.seek(toOffset: size > 4096 ? size - 4096 : 0)
        guard let data = try? handle.readToEnd() else { return nil }
        let last = String(decoding: data, as: UTF8.self).split(separator: "\n").last ?? ""
        let prefix = "haul: error: "
        return last.hasPrefix(prefix) ? String(last.dropFirst(prefix.count)) : nil
    }

    /// Starts `haul daemon` detached from this terminal, logging to `daemon.log`.
    /// - Returns: its pid.
    static func start(_ paths: DaemonPaths, arguments: [String] = []) throws -> Int32 {
        try FileManager.default.createDirectory(
            atPath: paths.home.path,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        let logDescriptor = try HomeFile.open(paths.log, O_WRONLY | O_CREAT | O_APPEND)
        let log = FileHandle(fileDescriptor: logDescriptor, closeOnDealloc: true)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executablePath())
        process.arguments = ["daemon", "start", "--foreground", "--detach"] + arguments
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        do {
            try process.run()
        } catch {
            throw HaulError(.fileSystem, "Cannot start the Haul daemon", underlying: error)
        }
        return process.processIdentifier
    }

    /// This program, to run as the daemon.
    private static func executablePath() -> String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"))
            ?? CommandLine.arguments[0]
    }
}
