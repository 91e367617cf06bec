import Foundation
import Haul
import HaulClient
import HaulDaemon

/// `haul daemon start` without `--foreground`: starts the daemon of a home in the background
/// and says so once it answers — on its TCP listener too when `--listen` asked for one — or
/// says why not. A daemon already running is named; one running without the listener asked
/// for is not taken for a success, since `--listen` applies only when a daemon starts.
struct BackgroundDaemon {
    let home: HaulHome
    /// The `--listen` given, if any.
    let listen: String?

    func start(arguments: [String], environment: [String: String]) async throws {
        let paths = DaemonPaths(home: home)
        if let pid = DaemonLock.holder(paths.lock) {
            try await checkRunning(pid: pid)
            return
        }
        let client = HaulClient(home: home)
        do {
            let started = try DaemonConnection.start(paths, arguments: arguments, environment: environment)
            let pid = started.pid
            try await DaemonConnection.waitUntilAnswering(client, paths, started: started, listening: listen != nil)
            try? await client.shutdown()
            // Another start may have won the race: name the daemon that runs.
            if let holder = DaemonLock.holder(paths.lock), holder != pid {
                try await checkRunning(pid: holder)
            } else {
                CLIError.note("Started the Haul daemon (pid \(pid); socket \(paths.socket); log \(paths.log)).")
            }
        } catch {
            try? await client.shutdown()
            guard let error = error as? HaulError else { throw error }
            CLIError.print(error)
            throw ExitStatus.daemon.exit
        }
    }

    /// Says that the daemon `pid` runs; fails (status 8) when `--listen` was given and it
    /// listens elsewhere or not at all, with the commands that start it as asked.
    private func checkRunning(pid: Int32) async throws {
        guard let listen else {
            CLIError.note("The Haul daemon is already running (pid \(pid)).")
            return
        }
        let client = HaulClient(home: home)
        let health = try? await client.health(timeout: .seconds(5))
        try? await client.shutdown()
        let listening = health?.listen
        if let listening, BackgroundDaemon.same(listening, listen) {
            CLIError.note("The Haul daemon is already running (pid \(pid)), listening on \(listening).")
            return
        }
        let now = listening.map { "listening on \($0)" } ?? "without a TCP listener"
        CLIError.print(
            HaulError(
                .busy,
                "The Haul daemon is already running (pid \(pid)) \(now); --listen applies when it starts",
                hint:
                    "Restart it with the listener: haul daemon stop && haul daemon --listen \(listen) (its downloads continue where they were)"
            )
        )
        throw ExitStatus.daemon.exit
    }

    /// Whether the address a daemon listens on is the one asked for (port 0 asks for any port).
    static func same(_ listening: String, _ asked: String) -> Bool {
        if listening == asked { return true }
        guard asked.hasSuffix(":0"), let colon = listening.lastIndex(of: ":") else { return false }
        return listening[..<colon] == asked.dropLast(2)
    }
}
