import ArgumentParser
import Foundation
import Haul
import HaulWire
import HaulWireMapping

/// The `haul` command: the root of every subcommand.
public struct HaulCommand: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "haul",
        abstract: "Resumable, crash-safe downloads.",
        discussion: """
            Downloads continue where they stopped after Ctrl-C, a crash, kill -9 or a reboot: \
            run the same command again. State lives in $HAUL_HOME (default ~/.local/share/haul).

            \(ExitStatus.summary)
            """,
        version: HaulVersion.current,
        subcommands: [
            Get.self, Add.self, List.self, Pause.self, Resume.self, Cancel.self, Remove.self, SetLimits.self,
            Watch.self, Events.self, Wait.self, Status.self, UI.self, Daemon.self, Config.self, Completions.self,
        ],
        defaultSubcommand: nil
    )

    public init() {}

    /// The command line as `haul` runs it: as typed, and with the configuration file's defaults.
    public struct CommandLineWords: Sendable {
        let typed: [String]
        let arguments: [String]
        let configuration: ConfigFile?
    }

    /// The first part of the `haul` executable's start, on the main thread before any task
    /// runs: the configuration file's defaults added, and `get`'s store opening on a thread of
    /// its own (``StoreHeadStart``) while Swift's cooperative threads start and the words
    /// are parsed. A configuration file that cannot be read ends the program here, saying why.
    public static func start() -> CommandLineWords {
        Output.ignoreBrokenPipes()
        ProcessMemory.retainFreedMemory()
        let typed = Array(CommandLine.arguments.dropFirst())
        // The configuration file's defaults, for the commands it has them for.
        var arguments = typed
        var configuration: ConfigFile?
        if ConfigFile.command(in: typed) != nil {
            do {
                configuration = try ConfigFile.load()
                arguments = configuration?.arguments(for: typed) ?? typed
                if let configuration, arguments != typed {
                    let added = Set(arguments.filter { !typed.contains($0) }.map { String($0.prefix { $0 != "=" }) })
                    CLIError.fileDefaults.withLock { $0 = (configuration.location.path, added) }
                }
            } catch let error as HaulError {
                CLIError.print(error)
                Foundation.exit(ExitStatus(error).rawValue)
            } catch {
                Foundation.exit(ExitStatus.failure.rawValue)
            }
        }
        if ConfigFile.command(in: arguments)?.0 == .get {
            StoreHeadStart.begin(for: arguments.dropFirst(), path: HaulHome.resolve().storePath)
        }
        return CommandLineWords(typed: typed, arguments: arguments, configuration: configuration)
    }

    /// The `haul` executable's entry point after ``start()``: runs the command line, with
    /// argument errors told in one line (the option, what was wrong, where to read more)
    /// instead of the usage dump, and a closed stdout or stderr never fatal.
    public static func runMain(_ words: CommandLineWords) async {
        let (typed, arguments, configuration) = (words.typed, words.arguments, words.configuration)
        do {
            if let get = getCommand(arguments) {
                try await get.run()
                return
            }
            var command = try parseAsRoot(arguments)
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            let code = exitCode(for: error)
            guard code == .validationFailure else { exit(withError: error) }
            var line = ArgumentErrors.line(for: message(for: error))
            if let configuration, arguments != typed, (try? parseAsRoot(typed)) != nil {
                // The command line alone is fine: a default from the file is not.
                line = "in \(configuration.location.path): " + line + "; 'haul config show' lists what it sets"
            }
            Output.error("haul: error: \(line)\n")
            Foundation.exit(ExitStatus.usage.rawValue)
        }
    }
}

extension HaulCommand {
    /// `haul get`'s words read from the table of its options (``GetCommandLine``), without
    /// ArgumentParser's reflection of them: about 2 ms of a 1 KiB download's 12. Nil for any
    /// other command, and for any line that table does not read: then the whole command line
    /// is parsed, and its errors and help are told in the words of the `haul` command as ever.
    static func getCommand(_ arguments: [String]) -> Get? {
        guard arguments.first == "get" else { return nil }
        return GetCommandLine.parse(arguments.dropFirst())
    }
}

/// One-line messages for argument errors.
enum ArgumentErrors {
    /// What each kind of value looks like, by the option that takes it.
    static let forms: [String: String] = [
        "--limit-rate": "a rate such as 500K or 10M (bytes per second)",
        "--total-limit-rate": "a rate such as 500K or 10M (bytes per second)",
        "--min-split": "a size such as 1M or 64K",
        "--timeout": "a number of seconds, such as 30 or 2.5",
        "--connect-timeout": "a number of seconds, such as 30 or 2.5",
        "--retry-max-wait": "a number of seconds, such as 600",
        "--lowest-speed-limit": "a rate such as 1K (bytes per second), 0 for none",
        "--lowest-speed-time": "a number of seconds, such as 30",
        "--checkpoint-interval": "a number of seconds",
        "--connections": "a whole number from 1 to \(DownloadRequest.maxConnections)",
        "--max-concurrent": "a whole number, 1 or more",
        "--retries": "a whole number, 0 or more",
        "--priority": "a whole number",
        "--listen": "an address such as 127.0.0.1:6800",
    ]

    static let shortNames = ["-x": "--connections", "-j": "--max-concurrent"]

    /// ArgumentParser's message cut to its first line, with the expected form of the value
    /// when the message names an option that has one.
    static func line(for message: String) -> String {
        var line = String(message.split(separator: "\n").first ?? "")
        if line.isEmpty { line = "Invalid arguments" }
        let named = line.split(whereSeparator: { $0 == "'" || $0 == " " || $0 == "/" }).map(String.init)
        if let option = named.lazy.compactMap({ forms[$0] != nil ? $0 : shortNames[$0] }).first,
            let form = forms[option]
        {
            line += "; \(option) takes \(form)"
        }
        return line + " (see --help)"
    }
}
