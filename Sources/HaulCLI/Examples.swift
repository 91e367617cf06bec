/// The "Examples:" block at the end of a command's `--help`: commands people can copy, each
/// under a comment saying what it does (one line each, so nothing wraps at 80 columns).
enum Examples {
    /// Built with `+=`, not `map` and `joined(separator:)`: every command's block is made
    /// whenever any command line is parsed (ArgumentParser reads all the subcommands'
    /// configurations), and the generic `joined` asked the runtime about conformances it
    /// finds by scanning the whole binary.
    static func block(_ examples: [(command: String, meaning: String)]) -> String {
        var text = "Examples:"
        for example in examples {
            text += "\n  # " + example.meaning + "\n  " + example.command
        }
        return text
    }
}
