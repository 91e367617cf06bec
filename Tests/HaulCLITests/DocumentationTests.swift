import ArgumentParser
import Foundation
import HaulTestSupport
import Testing

@testable import HaulCLI

/// The README, docs/ and the DocC articles as a reader follows them: every relative link and
/// image leads to a file there (and an `#anchor` to a heading of it), every `<doc:…>` to an
/// article, and every `haul …` command in their shell examples parses as the command line
/// parses it (options, values and their checks), so an example cannot drift from the code.
@Suite("Documentation: links and command examples", .timeLimit(.minutes(2)))
struct DocumentationTests {
    static let root = TestPaths.repository

    /// README.md, CONTRIBUTING.md, docs/*.md and the DocC catalog's articles, by path from the root.
    static let pages: [String] = {
        var pages = ["README.md", "CONTRIBUTING.md"]
        for directory in ["docs", "Sources/Haul/Haul.docc"] {
            let names =
                (try? FileManager.default.contentsOfDirectory(atPath: root.appendingPathComponent(directory).path))
            pages += (names ?? []).filter { $0.hasSuffix(".md") }.sorted().map { "\(directory)/\($0)" }
        }
        return pages
    }()

    static func text(_ page: String) throws -> String {
        try String(contentsOf: root.appendingPathComponent(page), encoding: .utf8)
    }

    @Test("every relative link and image of the README and docs leads to a file, and every anchor to a heading")
    func links() throws {
        #expect(Self.pages.count >= 12, "\(Self.pages)")
        var checked = 0
        for page in Self.pages {
            let text = try Self.text(page)
            let directory = (page as NSString).deletingLastPathComponent
            for target in Markdown.links(in: Markdown.prose(text)) {
                if target.hasPrefix("http://") || target.hasPrefix("https://") {
                    #expect(URL(string: target)?.host != nil, "\(page): \(target)")
                    continue
                }
                checked += 1
                let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false)
                let file = parts[0].isEmpty ? page : (directory as NSString).appendingPathComponent(String(parts[0]))
                let path = Self.root.appendingPathComponent(file).standardized.path
                guard FileManager.default.fileExists(atPath: path) else {
                    Issue.record("\(page): the link \(target) leads to no file")
                    continue
                }
                if parts.count == 2 {
                    let anchors = Markdown.anchors(in: try Self.text(file))
                    #expect(anchors.contains(String(parts[1])), "\(page): no heading #\(parts[1]) in \(file)")
                }
            }
            for article in Markdown.docLinks(in: text) {
                let file = Self.root.appendingPathComponent("Sources/Haul/Haul.docc/\(article).md").path
                #expect(FileManager.default.fileExists(atPath: file), "\(page): <doc:\(article)> is no article")
            }
        }
        #expect(checked > 30)
    }

    @Test("every haul command in the shell examples of the README and docs parses")
    func commandExamples() async throws {
        var commands: [(page: String, words: [String])] = []
        for page in Self.pages {
            commands += Markdown.haulCommands(in: try Self.text(page)).map { (page, $0) }
        }
        let parsed = commands
        // Hundreds of parses, each validated by ArgumentParser in a debug build: off the pool.
        let refused = await offCooperativePool {
            parsed.compactMap { command -> String? in
                do {
                    _ = try HaulCommand.parseAsRoot(command.words)
                    return nil
                } catch {
                    return "\(command.page): haul \(command.words.joined(separator: " ")): \(error)"
                }
            }
        }
        #expect(refused.isEmpty, "\(refused)")
        #expect(commands.count > 60)
    }
}

/// What the documentation tests read in Markdown.
enum Markdown {
    /// The text outside fenced code blocks and inline code.
    static func prose(_ text: String) -> String {
        var lines: [String] = []
        var inCode = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                inCode.toggle()
                continue
            }
            if !inCode { lines.append(String(line).replacing(/`[^`]*`/, with: "")) }
        }
        return lines.joined(separator: "\n")
    }

    /// The targets of `[text](target)` and `![alt](target)`.
    static func links(in text: String) -> [String] {
        text.matches(of: /\]\(([^)\s]+)\)/).map { String($0.output.1) }
    }

    /// The articles `<doc:Name>` names.
    static func docLinks(in text: String) -> [String] {
        text.matches(of: /<doc:([A-Za-z0-9_-]+)>/).map { String($0.output.1) }
    }

    /// The anchors GitHub gives a page's headings: lower case, punctuation but `-` and `_`
    /// dropped, spaces as `-`.
    static func anchors(in text: String) -> Set<String> {
        Set(
            prose(text).split(separator: "\n").filter { $0.hasPrefix("#") }.map { heading in
                let title = heading.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces).lowercased()
                return String(
                    title.unicodeScalars.filter {
                        CharacterSet.alphanumerics.contains($0) || $0 == "-" || $0 == "_" || $0 == " "
                    }.map(Character.init)
                ).replacingOccurrences(of: " ", with: "-")
            }
        )
    }

    /// The `haul` commands of the shell code blocks (```sh, ```bash, ```console): each
    /// line's commands (split at `&&`, `||`, `;` and `|`), without a `$ ` prompt, a `#`
    /// comment, redirections or `sudo`, as words a shell would give.
    static func haulCommands(in text: String) -> [[String]] {
        var commands: [[String]] = []
        var inShell = false
        var inCode = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.hasPrefix("```") {
                inShell = !inCode && ["```sh", "```bash", "```console", "```shell"].contains(String(line))
                inCode.toggle()
                continue
            }
            guard inShell else { continue }
            var body = String(line)
            if body.hasPrefix("$ ") { body.removeFirst(2) }
            for segment in Shell.commands(body) {
                var words = segment
                while let first = words.first, first.contains("=") && !first.hasPrefix("-") || first == "sudo" {
                    words.removeFirst()
                }
                guard words.first == "haul" else { continue }
                commands.append(Array(words.dropFirst()))
            }
        }
        return commands
    }
}

/// Just enough of a shell's word splitting for documentation examples.
enum Shell {
    /// The commands of `line` as words: quotes removed, `$(…)` kept whole, a comment, and
    /// redirections (`>`, `2>`, `<`) with their targets, dropped.
    static func commands(_ line: String) -> [[String]] {
        var commands: [[String]] = [[]]
        var word = ""
        var inWord = false
        var quote: Character?
        var depth = 0
        var characters = Array(line)[...]
        func endWord() {
            // As a shell expands it (an absolute path, as options that take one require).
            if word.hasPrefix("~") { word = "/home/user" + word.dropFirst() }
            if inWord { commands[commands.count - 1].append(word) }
            word = ""
            inWord = false
        }
        while let character = characters.popFirst() {
            if let open = quote {
                if character == open { quote = nil } else { word.append(character) }
                continue
            }
            if depth > 0 {
                word.append(character)
                if character == "(" { depth += 1 }
                if character == ")" { depth -= 1 }
                continue
            }
            switch character {
            case "'", "\"":
                quote = character
                inWord = true
            case "$" where characters.first == "(":
                word.append(character)
                inWord = true
                depth = 0
                word.append(characters.removeFirst())
                depth = 1
            case " ", "\t":
                endWord()
            case "#" where !inWord:
                endWord()
                return commands.filter { !$0.isEmpty }.map(withoutRedirections)
            case "|", "&", ";":
                endWord()
                while characters.first == "|" || characters.first == "&" { characters.removeFirst() }
                commands.append([])
            default:
                word.append(character)
                inWord = true
            }
        }
        endWord()
        return commands.filter { !$0.isEmpty }.map(withoutRedirections)
    }

    private static func withoutRedirections(_ words: [String]) -> [String] {
        var result: [String] = []
        var skipNext = false
        for word in words {
            if skipNext {
                skipNext = false
                continue
            }
            if ["<", ">", ">>", "2>", "2>>"].contains(word) {
                skipNext = true
                continue
            }
            if word.hasPrefix(">") || word.hasPrefix("2>") || word.hasPrefix("<") { continue }
            result.append(word)
        }
        return result
    }
}
