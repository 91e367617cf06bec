import Foundation
import Haul
import TOMLKit

/// The configuration file: defaults for the options of `haul get`, `haul add` and `haul
/// daemon`, in TOML, read from `$HAUL_CONFIG`, else `$XDG_CONFIG_HOME/haul/config.toml`
/// (`~/.config/haul/config.toml`).
///
/// A key is an option's long name without its dashes; top-level keys apply to every command
/// that has the option, and the `[get]`, `[add]` and `[daemon]` tables to one command,
/// winning over the top level:
///
/// ```toml
/// directory = "/data/downloads"
/// connections = 8
/// proxy = "http://proxy.corp:3128"
///
/// [get]
/// max-concurrent = 6
///
/// [daemon]
/// on-complete = "/usr/local/bin/notify-done"
/// ```
///
/// The file gives defaults, nothing more: an option on the command line wins over it. Its
/// values become options added to the command line (``arguments(for:)``), so they are
/// checked exactly as typed ones are.
struct ConfigFile: Sendable {
    /// The commands a configuration file sets defaults for.
    enum Command: String, CaseIterable, Sendable {
        case get, add, daemon
    }

    /// Where the file is, and why there.
    struct Location: Sendable, Equatable {
        var path: String
        /// `HAUL_CONFIG`, `XDG_CONFIG_HOME` or `HOME`.
        var chosenBy: String
    }

    /// A value the file sets, and where.
    struct Setting: Sendable, Equatable {
        var key: ConfigKey
        var value: Value
        /// The table it came from: nil for the top level, else the command's.
        var table: Command?
    }

    /// A TOML value of a kind a key takes.
    enum Value: Sendable, Equatable {
        case text(String)
        case toggle(Bool)
        case list([String])

        var display: String {
            switch self {
            case .text(let text): text
            case .toggle(let on): on ? "true" : "false"
            case .list(let items): items.joined(separator: ", ")
            }
        }
    }

    let location: Location
    /// Whether the file exists (a missing file is no error: there are no defaults).
    let exists: Bool
    let settings: [Setting]

    /// The first escape in `text` that stands for a control character (`\u` and four hex
    /// digits, or `\U` and eight, whose value is below 0x20 or 0x7F), and its line. Scanned by
    /// byte rather than with a regular expression literal, which Swift parses and compiles
    /// again at each evaluation: 0.7 ms of every command run with a configuration file.
    static func controlEscape(in text: String) -> (escape: String, line: Int)? {
        let bytes = Array(text.utf8)
        var line = 1
        for (index, byte) in bytes.enumerated() {
            if byte == UInt8(ascii: "\n") { line += 1 }
            guard byte == UInt8(ascii: "\\"), index + 1 < bytes.count else { continue }
            let width = bytes[index + 1] == UInt8(ascii: "u") ? 4 : bytes[index + 1] == UInt8(ascii: "U") ? 8 : 0
            let digits = (index + 2)..<(index + 2 + width)
            guard width > 0, digits.upperBound <= bytes.count,
                let value = UInt32(String(decoding: bytes[digits], as: UTF8.self), radix: 16),
                bytes[digits].allSatisfy({ $0 != UInt8(ascii: "+") && $0 != UInt8(ascii: "-") }),
                value < 0x20 || value == 0x7F
            else { continue }
            return (String(decoding: bytes[index..<digits.upperBound], as: UTF8.self), line)
        }
        return nil
    }

    /// Where the file is looked for, by the environment.
    static func location(_ environment: [String: String] = ProcessInfo.processInfo.environment) -> Location {
        if let path = environment["HAUL_CONFIG"], !path.isEmpty { return Location(path: path, chosenBy: "HAUL_CONFIG") }
        if let base = environment["XDG_CONFIG_HOME"], base.hasPrefix("/") {
            return Location(path: base + "/haul/config.toml", chosenBy: "XDG_CONFIG_HOME")
        }
        let home = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 } ?? NSHomeDirectory()
        return Location(path: home + "/.config/haul/config.toml", chosenBy: "HOME")
    }

    /// Reads and checks the file.
    /// - Throws: ``HaulError`` (`invalidArgument`) naming the file and what is wrong in it:
    ///   a TOML syntax error (with its line), an unknown table or key, a value of the wrong kind.
    static func load(_ environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ConfigFile {
        let location = location(environment)
        guard FileManager.default.fileExists(atPath: location.path) else {
            if location.chosenBy == "HAUL_CONFIG" {
                throw HaulError(
                    .invalidArgument,
                    "HAUL_CONFIG names \(location.path), which does not exist",
                    hint: "Create it, or unset HAUL_CONFIG"
                )
            }
            return ConfigFile(location: location, exists: false, settings: [])
        }
        let text: String
        do {
            let data = try Data(contentsOf: URL(fileURLWithPath: location.path))
            guard data.count <= 1 << 20 else {
                throw HaulError(.invalidArgument, "The configuration file \(location.path) is larger than 1 MiB")
            }
            text = String(decoding: data, as: UTF8.self)
        } catch let error as HaulError {
            throw error
        } catch {
            throw HaulError(
                .fileSystem,
                "Cannot read the configuration file \(location.path): \((error as NSError).localizedDescription)"
            )
        }
        return ConfigFile(location: location, exists: true, settings: try parse(text, path: location.path))
    }

    /// The settings in a TOML document.
    static func parse(_ text: String, path: String) throws -> [Setting] {
        // TOML forbids control characters but tabs and newlines; the parser would stop at a
        // NUL without a word, dropping the rest of the file or of a string.
        if let index = text.unicodeScalars.firstIndex(where: {
            $0.value < 0x20 && $0 != "\t" && $0 != "\n" && $0 != "\r" || $0.value == 0x7f
        }) {
            let line = text.unicodeScalars[..<index].filter { $0 == "\n" }.count + 1
            let code = String(format: "U+%04X", text.unicodeScalars[index].value)
            throw HaulError(
                .invalidArgument,
                "\(path), line \(line): a control character (\(code)), which a TOML file cannot hold",
                hint: "Remove it: no option takes one"
            )
        }
        // The same as an escape in a string (\u0000): the parser hands the value over as a C
        // string, cut at the NUL, so it is refused before it is parsed.
        if let (escape, line) = controlEscape(in: text) {
            throw HaulError(
                .invalidArgument,
                "\(path), line \(line): the escape \(escape) stands for a control character, which no option takes",
                hint: "Remove it"
            )
        }
        let table: TOMLTable
        do {
            table = try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw HaulError(
                .invalidArgument,
                "\(path), line \(error.source.begin.line): \(error.description)",
                hint: "Fix the file's TOML syntax"
            )
        }
        var settings: [Setting] = []
        for (name, value) in table.sorted(by: { $0.0 < $1.0 }) {
            if let command = Command(rawValue: name) {
                guard let section = value.table else {
                    throw HaulError(.invalidArgument, "\(path): [\(name)] must be a table of options")
                }
                for (key, value) in section.sorted(by: { $0.0 < $1.0 }) {
                    settings.append(try setting(key, value, table: command, path: path))
                }
            } else {
                settings.append(try setting(name, value, table: nil, path: path))
            }
        }
        return settings
    }

    private static func setting(
        _ name: String,
        _ value: any TOMLValueConvertible,
        table: Command?,
        path: String
    ) throws -> Setting {
        let place = table.map { "[\($0.rawValue)] \(name)" } ?? name
        guard let key = ConfigKey.all.first(where: { $0.name == name }) else {
            let known = ConfigKey.all.filter { table == nil || $0.commands.contains(table!) }.map(\.name)
            throw HaulError(
                .invalidArgument,
                "\(path): unknown key '\(place)'",
                hint: "Known keys\(table.map { " of [\($0.rawValue)]" } ?? ""): \(known.joined(separator: ", "))"
            )
        }
        if let table, !key.commands.contains(table) {
            throw HaulError(
                .invalidArgument,
                "\(path): \(name) is not an option of haul \(table.rawValue)",
                hint: "It applies to: \(key.commands.map { "haul \($0.rawValue)" }.joined(separator: ", "))"
            )
        }
        let parsed: Value?
        switch key.kind {
        case .value:
            if let text = value.string {
                parsed = .text(text)
            } else if let number = value.int {
                parsed = .text(String(number))
            } else if let number = value.double, number.isFinite {
                parsed = .text(String(number))
            } else {
                parsed = nil
            }
        case .toggle:
            parsed = value.bool.map(Value.toggle)
        case .list:
            if let text = value.string {
                parsed = .list([text])
            } else if let array = value.array {
                let items = array.compactMap(\.string)
                parsed = items.count == array.count ? .list(items) : nil
            } else {
                parsed = nil
            }
        }
        let texts: [String]
        switch parsed {
        case .text(let text)?: texts = [text]
        case .list(let items)?: texts = items
        default: texts = []
        }
        if texts.contains(where: { $0.unicodeScalars.contains { $0.properties.generalCategory == .control } }) {
            // An escape such as \u0000 in a string: no option takes one, and C would cut the
            // value there.
            throw HaulError(
                .invalidArgument,
                "\(path): \(place) holds a control character",
                hint: "Remove it: no option takes one"
            )
        }
        guard let parsed else {
            throw HaulError(
                .invalidArgument,
                "\(path): \(place) must be \(key.kind.expected), not \(value.type)",
                hint: key.help
            )
        }
        return Setting(key: key, value: parsed, table: table)
    }

    /// The setting `command` takes for `key`: its own table's, else the top level's.
    func setting(_ key: ConfigKey, for command: Command) -> Setting? {
        guard key.commands.contains(command) else { return nil }
        return settings.first { $0.key == key && $0.table == command }
            ?? settings.first { $0.key == key && $0.table == nil }
    }

    /// `arguments` (a `haul` command line, without the program's name) with the file's
    /// defaults added for every option of its command that it does not give.
    func arguments(for arguments: [String]) -> [String] {
        guard let (command, start) = ConfigFile.command(in: arguments) else { return arguments }
        let given = ConfigFile.optionsGiven(in: arguments[start...])
        var added: [String] = []
        for key in ConfigKey.all {
            guard let setting = setting(key, for: command), given.isDisjoint(with: key.spellings) else { continue }
            added += key.arguments(for: setting.value)
        }
        return Array(arguments[..<start]) + added + Array(arguments[start...])
    }

    /// The command a command line runs, and where its options begin; nil for commands the
    /// file has no defaults for (and for `haul daemon stop`).
    static func command(in arguments: [String]) -> (Command, Int)? {
        guard let first = arguments.first, let command = Command(rawValue: first) else { return nil }
        if command == .daemon, let next = arguments.dropFirst().first, !next.hasPrefix("-") {
            return next == "start" ? (.daemon, 2) : nil
        }
        return (command, 1)
    }

    /// The options a command line gives (`--name`, `--name=value`, `-x`), up to a `--`.
    static func optionsGiven(in arguments: ArraySlice<String>) -> Set<String> {
        var given: Set<String> = []
        for argument in arguments {
            if argument == "--" { break }
            if argument.hasPrefix("--") {
                given.insert(String(argument.prefix { $0 != "=" }))
            } else if argument.hasPrefix("-"), argument.count >= 2 {
                // `-qv`: each letter is a flag; `-x8`: the option and its value.
                for letter in argument.dropFirst() where letter.isLetter { given.insert("-\(letter)") }
            }
        }
        return given
    }
}
