import ArgumentParser

extension HaulCommand {
    /// `haul completions SHELL`: the completion script, generated from the command definitions.
    struct Completions: ParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "completions",
            abstract: "Print the shell completion script for bash, zsh or fish.",
            discussion: Examples.block([
                ("source <(haul completions bash)", "in this bash; add it to ~/.bashrc to keep it"),
                ("haul completions zsh > ~/.zfunc/_haul", "zsh, with ~/.zfunc in $fpath"),
                ("haul completions fish > ~/.config/fish/completions/haul.fish", "fish"),
            ])
        )

        @Argument(help: "bash, zsh or fish.")
        var shell: String

        func validate() throws {
            guard CompletionShell(rawValue: shell) != nil else {
                throw ValidationError("Unknown shell '\(shell)': haul completes bash, zsh and fish")
            }
        }

        func run() throws {
            guard let shell = CompletionShell(rawValue: shell) else { return }
            Output.standard(HaulCommand.completionScript(for: shell))
        }
    }
}
