/// The "Examples:" block at the end of a command's `--help`: commands people can copy, each
/// under a comment saying what it does (one line each, so nothing wraps at 80 columns).
enum Examples {
    static func block(_ examples: [(command: String, meaning: String)]) -> String {
        "Examples:\n" + examples.map { "  # \($0.meaning)\n  \($0.command)" }.joined(separator: "\n")
    }
}
