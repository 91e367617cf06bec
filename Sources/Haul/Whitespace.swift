import Foundation

extension StringProtocol {
    /// The text without the spaces and tabs (and other Unicode spaces) at its ends, as
    /// Foundation's `trimmingCharacters(in: .whitespaces)` gives it — but without calling
    /// Foundation for text that begins and ends with printable ASCII, which needs no trim
    /// (every URL of a list of a million read from an input file or a request body).
    package func trimmingWhitespace() -> String {
        let text = String(self)
        let printable = UInt8(ascii: "!")...UInt8(ascii: "~")
        guard let first = text.utf8.first, let last = text.utf8.last, printable.contains(first),
            printable.contains(last)
        else { return text.trimmingCharacters(in: .whitespaces) }
        return text
    }
}
