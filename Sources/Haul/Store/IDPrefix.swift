import Foundation

/// The task ids that begin with some hex digits — an aria2 GID (the first 16 digits of a
/// task's id) or a prefix of one: every id from ``lowest`` to ``highest``, a range a store
/// reads from its primary key's index instead of looking at every task.
package struct IDPrefix: Sendable, Hashable {
    package let lowest: UUID
    package let highest: UUID

    /// - Parameter hex: 1 to 32 hex digits (either case); nil for anything else.
    package init?(hex: String) {
        let digits = Array(hex.utf8)
        guard (1...32).contains(digits.count) else { return nil }
        var low = [UInt8](repeating: 0, count: 16)
        var high = [UInt8](repeating: 0xff, count: 16)
        for (index, digit) in digits.enumerated() {
            guard let value = IDPrefix.value(of: digit) else { return nil }
            let shift: UInt8 = index % 2 == 0 ? 4 : 0
            let mask: UInt8 = 0x0f << shift
            low[index / 2] = (low[index / 2] & ~mask) | (value << shift)
            high[index / 2] = (high[index / 2] & ~mask) | (value << shift)
        }
        lowest = IDPrefix.uuid(low)
        highest = IDPrefix.uuid(high)
    }

    /// Whether `id` begins with the prefix.
    package func contains(_ id: UUID) -> Bool {
        withUnsafeBytes(of: id.uuid) { bytes in
            withUnsafeBytes(of: lowest.uuid) { low in
                withUnsafeBytes(of: highest.uuid) { high in
                    !bytes.lexicographicallyPrecedes(low) && !high.lexicographicallyPrecedes(bytes)
                }
            }
        }
    }

    private static func value(of digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    private static func uuid(_ b: [UInt8]) -> UUID {
        UUID(
            uuid: (b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15])
        )
    }
}
