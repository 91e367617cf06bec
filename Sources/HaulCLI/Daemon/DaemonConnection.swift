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
        if let started { CLIError.note("haul: started the daemon (pid \(started); log: \(paths.log))") }
        return client
    }

    /// Waits up to 15 s for the daemon to answer; gives up early when `pid` (the daemon just
    /// started) has exited.
    static func waitUntilAnswering(_ client: HaulClient, _ paths: DaemonPaths, pid: Int32?) async throws {
        let deadline = ContinuousClock.now + .seconds(15)
        while ContinuousClock.now < deadline {
            if (try? await client.status(timeout: .seconds(1))) != nil { return }
            if let pid, kill(pid, 0) != 0, DaemonLock.holder(paths.lock) == nil { break }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw HaulError(
            .connection,
            "The Haul daemon did not answer on \(paths.socket)",
            hint: "See its log: \(paths.log)"
        )
    }

    /// Starts `haul daemon` detached from this terminal, logging to `daemon.log`.
    /// - Returns: its pid.
    static func start(_ paths: DaemonPaths, arguments: [String] = []) throws -> Int32 {
        try FileManager.default.createDirectory(
            atPath: paths.home.path,
            withIntermediateDirectories: true,
            attributes: [.posixPermissions: 0o700]
        )
        let logDescriptor = open(paths.log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
        guard logDescriptor >= 0 else { throw HaulError.fileSystem("open", path: paths.log, errno: errno) }
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
