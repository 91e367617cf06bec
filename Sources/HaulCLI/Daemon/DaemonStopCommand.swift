import ArgumentParser
import Foundation
import Haul
import HaulClient
import HaulDaemon
import HaulWire
import HaulWireMapping

extension HaulCommand.Daemon {
    struct Stop: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "stop",
            abstract: "Stop the daemon cleanly; its unfinished downloads continue at its next start.",
            discussion: Examples.block([
                ("haul daemon stop", "checkpoint every download and stop")
            ])
        )

        func run() async throws {
            let paths = DaemonPaths(home: HaulHome.resolve())
            guard let pid = DaemonLock.holder(paths.lock) else {
                CLIError.note("No Haul daemon is running.")
                return
            }
            try await withDaemon(autoStart: false) { client in try await client.stopDaemon() }
            // Stopped means gone: the lock free and the process ended, so nothing it does
            // (closing the store) can follow this command's answer.
            let deadline = ContinuousClock.now + .seconds(60)
            func running() -> Bool { DaemonLock.holder(paths.lock) != nil || DaemonLock.isAlive(pid) }
            while running(), ContinuousClock.now < deadline {
                try await Task.sleep(for: .milliseconds(20))
            }
            if running() {
                CLIError.print(HaulError(.busy, "The Haul daemon (pid \(pid)) has not stopped after 60 s"))
                throw ExitStatus.daemon.exit
            }
            CLIError.note("Stopped the Haul daemon (pid \(pid)).")
        }
    }
}
