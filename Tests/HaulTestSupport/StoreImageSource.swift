import Foundation

/// The text of `StoreImage`'s length and stretches for a new store's bytes: what
/// `StoreCreationTests.imageIsTheSchema` prints when the schema has changed.
package enum StoreImageSource {
    /// Zeros that end a stretch: fewer are kept in it.
    static let gap = 32

    package static func text(for bytes: [UInt8]) -> String {
        var lines = [
            "    static let size = \(grouped(bytes.count))", "",
            "    static let stretches: [(offset: Int, base64: String)] = [",
        ]
        for (offset, stretch) in stretches(of: bytes) {
            let base64 = Data(stretch).base64EncodedString()
            let pieces = stride(from: 0, to: base64.count, by: 96).map { start -> String in
                let from = base64.index(base64.startIndex, offsetBy: start)
                let to = base64.index(from, offsetBy: min(96, base64.count - start))
                return "            " + base64[from..<to]
            }
            lines.append("        (\(grouped(offset)), \"\"\"")
            lines.append(pieces.joined(separator: "\\\n"))
            lines.append("            \"\"\"),")
        }
        lines.append("    ]")
        return lines.joined(separator: "\n")
    }

    /// Where each run of bytes other than zeros begins, and its bytes (gaps shorter than
    /// `gap` kept inside).
    static func stretches(of bytes: [UInt8]) -> [(Int, ArraySlice<UInt8>)] {
        var result: [(Int, ArraySlice<UInt8>)] = []
        var index = 0
        while index < bytes.count {
            guard bytes[index] != 0 else {
                index += 1
                continue
            }
            let start = index
            var last = index
            var probe = index
            while probe < bytes.count, probe - last <= gap {
                if bytes[probe] != 0 { last = probe }
                probe += 1
            }
            result.append((start, bytes[start...last]))
            index = last + 1
        }
        return result
    }

    /// 77824 as 77_824.
    private static func grouped(_ value: Int) -> String {
        let digits = Array(String(value))
        var text = ""
        for (position, digit) in digits.enumerated() {
            if position > 0, (digits.count - position) % 3 == 0 { text.append("_") }
            text.append(digit)
        }
        return text
    }
}
