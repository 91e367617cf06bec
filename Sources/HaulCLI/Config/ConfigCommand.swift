import ArgumentParser
import Foundation
import Haul
import HaulWire
import HaulWireMapping

extension HaulCommand {
    /// `haul config`: the configuration file.
    struct Config: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "config",
            abstract: "Show the configuration file's defaults for haul get, haul add and haul daemon.",
            discussion: """
                The file is $HAUL_CONFIG, else $XDG_CONFIG_HOME/haul/config.toml (~/.config/haul/config.toml). \
                Its keys are the options' long names; top-level keys apply to every command that has the \
                option, [get], [add] and [daemon] tables to one. An option on the command line wins.

                \(Examples.block([
                    ("haul config show", "every setting, its value and its source"),
                    ("haul config show --json", "the same, for scripts"),
                ]))
                """,
            subcommands: [Show.self],
            defaultSubcommand: Show.self
        )

        /// `haul config show`: every setting, its value and where it came from.
        struct Show: AsyncParsableCommand {
            static let configuration = CommandConfiguration(
                commandName: "show",
                abstract:
                    "Print the effective settings of haul get, haul add and haul daemon, and where each came from.",
                discussion: Examples.block([
                    ("haul config show", "every setting, its value and its source"),
                    ("HAUL_CONFIG=./ci.toml haul config show", "another file's"),
                ])
            )

            @Flag(help: "Print them as JSON.")
            var json = false

            /// One line of the listing.
            struct Row: Codable, Equatable {
                var command: String
                var key: String
                var value: String
                /// `default`, `config`, `config [get]`, or `environment NAME`.
                var source: String
            }

            struct Listing: Codable {
                var file: String
                var fileChosenBy: String
                var fileExists: Bool
                var settings: [Row]
            }

            func run() async throws {
                do {
                    let file = try ConfigFile.load()
                    let listing = Listing(
                        file: file.location.path,
                        fileChosenBy: file.location.chosenBy,
                        fileExists: file.exists,
                        settings: Show.rows(file)
                    )
                    if json {
                        let encoder = JSONEncoder()
                        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
                        print(String(decoding: try encoder.encode(listing), as: UTF8.self))
                        return
                    }
                    print(Show.text(listing))
                } catch let error as HaulError {
                    CLIError.print(error)
                    throw ExitStatus(error).exit
                }
            }

            /// The settings of each command: the file's, else the environment's, else the default.
            static func rows(
                _ file: ConfigFile,
                environment: [String: String] = ProcessInfo.processInfo.environment
            ) -> [Row] {
                var rows: [Row] = []
                for command in ConfigFile.Command.allCases {
                    for key in ConfigKey.all where key.commands.contains(command) {
                        if let setting = file.setting(key, for: command) {
                            let source = setting.table.map { "config [\($0.rawValue)]" } ?? "config"
                            let value =
                                key.name == "proxy" ? Redaction.text(setting.value.display) : setting.value.display
                            rows.append(Row(command: command.rawValue, key: key.name, value: value, source: source))
                        } else if let (variable, value) = fromEnvironment(key, command: command, environment) {
                            rows.append(
                                Row(
                                    command: command.rawValue,
                                    key: key.name,
                                    value: value,
                                    source: "environment \(variable)"
                                )
                            )
                        } else {
                            rows.append(
                                Row(command: command.rawValue, key: key.name, value: key.fallback, source: "default")
                            )
                        }
                    }
                }
                return rows
            }

            /// A setting the environment gives when neither the file nor the command line does.
            static func fromEnvironment(
                _ key: ConfigKey,
                command: ConfigFile.Command,
                _ environment: [String: String]
            ) -> (String, String)? {
                // `haul add` resolves these in its own environment; the daemon's API has its own.
                guard command != .daemon else { return nil }
                let names: [String] =
                    switch key.name {
                    case "proxy": ["https_proxy", "HTTPS_PROXY", "http_proxy", "all_proxy", "ALL_PROXY"]
                    case "noproxy": ["no_proxy", "NO_PROXY"]
                    case "cacert": ["SSL_CERT_FILE"]
                    case "capath": ["SSL_CERT_DIR"]
                    default: []
                    }
                for name in names {
                    if let value = environment[name], !value.isEmpty { return (name, Redaction.text(value)) }
                }
                return nil
            }

            static func text(_ listing: Listing) -> String {
                var lines = [
                    "Configuration file: \(listing.file) (\(listing.fileExists ? "found" : "not found"); chosen by \(listing.fileChosenBy))"
                ]
                let width = (listing.settings.map(\.key.count).max() ?? 10) + 2
                let valueWidth = min(40, (listing.settings.map(\.value.count).max() ?? 10) + 2)
                for command in ConfigFile.Command.allCases {
                    lines.append("")
                    lines.append("haul \(command.rawValue):")
                    for row in listing.settings where row.command == command.rawValue {
                        let key = row.key.padding(toLength: width, withPad: " ", startingAt: 0)
                        let value = row.value.padding(
                            toLength: max(valueWidth, row.value.count + 2),
                            withPad: " ",
                            startingAt: 0
                        )
                        lines.append("  \(key)\(value)\(row.source)")
                    }
                }
                lines.append("")
                lines.append("An option on the command line wins over all of these.")
                return lines.joined(separator: "\n")
            }
        }
    }
}
