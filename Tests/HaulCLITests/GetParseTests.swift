import ArgumentParser
import Testing

@testable import HaulCLI

/// `haul get` parsed as that command alone (``HaulCommand/getCommand(_:)``) gives what the
/// whole command line's parse gives, and leaves everything else to it.
@Suite("haul get's own parse", .timeLimit(.minutes(1)))
struct GetParseTests {
    @Test(
        "the same options and URLs as the whole tree's parse",
        arguments: [
            ["get", "http://h/a"],
            ["get", "-q", "-o", "out.bin", "http://h/a"],
            ["get", "-x", "4", "--limit-rate", "1M", "-d", "dir", "http://h/a", "http://h/b"],
            ["get", "--checksum", "sha256=" + String(repeating: "0", count: 64), "http://h/a", "--insecure"],
            ["get", "--", "http://h/-a", "--not-an-option"],
            ["get", "-j", "2", "-i", "list.txt"],
            ["get", "help"],  // a URL to `get`, refused as one when it runs
        ]
    )
    func sameAsTheTree(arguments: [String]) throws {
        let alone = try #require(HaulCommand.getCommand(arguments))
        let whole = try HaulCommand.parseAsRoot(arguments)
        #expect(alone is HaulCommand.Get)
        #expect(String(describing: alone) == String(describing: whole))
    }

    @Test(
        "help, errors and other commands are left to the whole command line's parse",
        arguments: [
            ["get", "--help"], ["get", "-h"], ["get", "--version"], ["get", "--bogus", "http://h/a"],
            ["get"], ["list"], ["add", "http://h/a"], ["get", "--generate-completion-script", "bash"],
            ["get", "--experimental-dump-help"],
        ]
    )
    func leftToTheTree(arguments: [String]) {
        #expect(HaulCommand.getCommand(arguments) == nil)
    }
}
