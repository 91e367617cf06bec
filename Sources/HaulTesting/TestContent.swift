import Crypto
import Foundation

/// Deterministic test content.
public enum TestContent {
    /// `count` pseudo-random bytes from a seed and version (xorshift64*).
    public static func bytes(count: Int, seed: UInt64, version: Int = 1) -> [UInt8] {
        var state = (seed &* 0x9E37_79B9_7F4A_7C15) ^ UInt64(version) &* 0xBF58_476D_1CE4_E5B9 | 1
        var result = [UInt8](repeating: 0, count: count)
        result.withUnsafeMutableBytes { raw in
            var index = 0
            while index < count {
                state ^= state >> 12
                state ^= state << 25
                state ^= state >> 27
                var word = (state &* 0x2545_F491_4F6C_DD1D).littleEndian
                let n = min(8, count - index)
                withUnsafeBytes(of: &word) {
                    raw.baseAddress!.advanced(by: index).copyMemory(from: $0.baseAddress!, byteCount: n)
                }
                index += n
            }
        }
        return result
    }

    /// SHA-256 in lower-case hex.
    public static func sha256<Bytes: Sequence>(_ bytes: Bytes) -> String where Bytes.Element == UInt8 {
        SHA256.hash(data: Array(bytes)).map { String(format: "%02x", $0) }.joined()
    }

    /// SHA-256 of a file, in lower-case hex, or nil when it cannot be read.
    public static func sha256(file path: String) -> String? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        return SHA256.hash(data: data).map { String(format: "%02x", $0) }.joined()
    }
}
