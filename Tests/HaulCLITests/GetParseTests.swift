import ArgumentParser
import Testing

@testable import HaulCLI

/// `haul get`'s words read from the table of its options (``GetCommandLine``, through
/// ``HaulCommand/getCommand(_:)``) give what ArgumentParser's parse of the whole command line
/// gives, and everything the table does not read is left to that parse.
@Suite("haul get's own parse", .timeLimit(.minutes(1)))
struct GetParseTests {
    /// A value each option accepts, by its first name; "v" for the rest (text).
    static let samples: [String: String] = [
        "-x": "8", "--max-connections-per-server": "2", "--min-split": "1M", "--limit-rate": "500K",
        "-j": "2", "--max-connections-per-host": "6", "--total-limit-rate": "20M", "--retries": "0",
        "--connect-timeout": "2.5", "--timeout": "30", "--retry-max-wait": "600", "--wait-for-network": "10m",
        "--lowest-speed-limit": "1K", "--lowest-speed-time": "5", "--checkpoint-interval": "0.5", "-H": "X-A: 1",
        "--checksum": "sha256=" + String(repeating: "0", count: 64),
    ]

    /// Each name of the table, alone with a URL (and `--name=value` for the long names of values).
    static var everyName: [[String]] {
        var lines: [[String]] = []
        for (name, (first, action)) in GetCommandLine.table().sorted(by: { $0.key < $1.key }) {
            let needed = first == "--lowest-speed-time" ? ["--lowest-speed-limit", "1K"] : []
            switch action {
            case .flag: lines.append(["get", name, "http://h/a"])
            case .value, .list:
                let value = samples[first] ?? "v"
                lines.append(["get", name, value] + needed + ["http://h/a"])
                if name.hasPrefix("--") { lines.append(["get", "\(name)=\(value)"] + needed + ["http://h/a"]) }
            }
        }
        return lines
    }

    static let mixed: [[String]] = [
        ["get", "http://h/a"],
        ["get", "-q", "-o", "out.bin", "http://h/a"],
        ["get", "-x", "4", "--limit-rate", "1M", "-d", "dir", "http://h/a", "http://h/b"],
        ["get", "--checksum", "sha256=" + String(repeating: "0", count: 64), "http://h/a", "--insecure"],
        ["get", "--", "http://h/-a", "--not-an-option", "-x"],
        ["get", "-j", "2", "-i", "list.txt"],
        ["get", "-H", "A: 1", "--header", "B: 2", "--mirror", "http://m/1", "--mirror=http://m/2", "http://h/a"],
        ["get", "-o", "-", "http://h/a"],
        ["get", "--on-complete=-run", "http://h/a"],
        ["get", "-"],
        ["get", "help"],  // a URL to `get`, refused as one when it runs
        ["get", "--no-follow-metalink", "-N", "--continue", "-k", "-u", "me:pw", "--netrc", "http://h/a"],
    ]

    @Test("every name and value the table reads, as the whole tree's parse reads it", arguments: everyName + mixed)
    func sameAsTheTree(arguments: [String]) throws {
        let whole = try HaulCommand.parseAsRoot(arguments)
        let alone = try #require(HaulCommand.getCommand(arguments), "left to the tree: \(arguments)")
        #expect(String(describing: alone) == String(describing: whole))
    }

    @Test(
        "help, errors, what the table does not read and other commands are left to the whole tree's parse",
        arguments: [
            ["get", "--help"], ["get", "-h"], ["get", "--version"], ["get", "--bogus", "http://h/a"],
            ["get"], ["list"], ["add", "http://h/a"], ["get", "--generate-completion-script", "bash"],
            ["get", "--experimental-dump-help"], ["get", "-qv", "http://h/a"], ["get", "-x8", "http://h/a"],
            ["get", "--force", "--force", "http://h/a"], ["get", "-x", "4", "-x", "5", "http://h/a"],
            ["get", "--follow-metalink", "--no-follow-metalink", "http://h/a"], ["get", "http://h/a", "-x"],
            ["get", "-x", "many", "http://h/a"], ["get", "-x", "99", "http://h/a"], ["get", "-j", "0", "http://h/a"],
            ["get", "-o", "-x", "http://h/a"], ["get", "--json", "-o", "-", "http://h/a"],
            ["get", "--force=yes", "http://h/a"], ["get", "-o=f", "http://h/a"], ["get", "-H=A: 1", "http://h/a"],
            ["get", "-j", "-1", "http://h/a"],
            ["get", "--lowest-speed-time", "5", "http://h/a"], ["get", "--min-split", "1K", "http://h/a"],
        ]
    )
    func leftToTheTree(arguments: [String]) {
        #expect(HaulCommand.getCommand(arguments) == nil)
    }

    /// An option added to `get` and not to the table still works (ArgumentParser reads it), but
    /// costs every command line that names it the reflection the table saves.
    @Test("the table knows every name get's help lists")
    func tableKnowsEveryOption() {
        let help = HaulCommand.Get.helpMessage(includeHidden: true, columns: 400)
        let names = Set(
            help.split(whereSeparator: { " ,\n<>[]()".contains($0) }).map(String.init).filter {
                ($0.hasPrefix("--") && $0.count > 2 && $0.dropFirst(2).allSatisfy { $0.isLetter || $0 == "-" })
                    || ($0.count == 2 && $0.hasPrefix("-") && $0.last!.isLetter)
            }
        )
        let known = Set(GetCommandLine.table().keys).union(["-h", "--help", "--version"])
        #expect(names.count > 50)
        #expect(names.subtracting(known).isEmpty, "not in GetCommandLine.table: \(names.subtracting(known).sorted())")
    }
}
