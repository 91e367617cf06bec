import ArgumentParser
import Haul

/// The `haul` command: the root of every subcommand.
public struct HaulCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "haul",
        abstract: "Resumable, crash-safe downloads.",
        discussion: """
            Downloads continue where they stopped after Ctrl-C, a crash, kill -9 or a reboot: \
            run the same command again. State lives in $HAUL_HOME (default ~/.local/share/haul).
            """,
        version: HaulVersion.current,
        subcommands: [
            Get.self, Add.self, List.self, Pause.self, Resume.self, Cancel.self, Remove.self, Set.self,
            Watch.self, Events.self, Wait.self, Status.self, Daemon.self,
        ],
        defaultSubcommand: nil
    )

    public init() {}
}
