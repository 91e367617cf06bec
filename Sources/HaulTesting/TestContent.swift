import Crypto
import Foundation

/// Deterministic test content.
public enum TestContent {
    /// `count` pseudo-random bytes from a seed and version (xorshift64*), each word's bytes in
    /// little-endian order. Tests call this on Swift's cooperative pool, in debug builds: the
    /// loop writes whole words through a pointer, so a hundred MiB takes a fraction of a second
    /// rather than holding one of the pool's few threads for many.
    public static func bytes(count: Int, seed: UInt64, version: Int = 1) -> [UInt8] {
        var state = (seed &* 0x9E37_79B9_7F4A_7C15) ^ UInt64(version) &* 0xBF58_476D_1CE4_E5B9 | 1
        let wordCount = (count + 7) / 8
        let words = [UInt64](unsafeUninitializedCapacity: wordCount) { buffer, initialized in
            guard let base = buffer.baseAddress else { return }
            var index = 0
            while index < wordCount {
                state ^= state >> 12
                state ^= state << 25
                state ^= state >> 27
                (base + index).initialize(to: (state &* 0x2545_F491_4F6C_DD1D).littleEndian)
                index += 1
            }
            initialized = wordCount
        }
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            words.withUnsafeBytes { source in
                if let base = buffer.baseAddress, let from = source.baseAddress {
                    UnsafeMutableRawPointer(base).copyMemory(from: from, byteCount: count)
                }
            }
            initialized = count
        }
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
