import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes received buffers back to back into a file at an offset, in as few `pwritev` calls
/// as the kernel allows (it takes at most 1,024 vectors a call, and may write less than
/// asked), without copying them into one buffer first.
enum GatherWrite {
    /// Writes `buffers` to `descriptor` from `offset`; returns where the write ended, or nil
    /// with `errno` set when a call failed.
    static func write(_ buffers: [ByteBuffer], to descriptor: Int32, at offset: Int64) -> Int64? {
        // The pointers stay valid while `buffers` holds the storage and nothing mutates it.
        var vectors = buffers.map { buffer in
            buffer.withUnsafeReadableBytes {
                iovec(iov_base: UnsafeMutableRawPointer(mutating: $0.baseAddress), iov_len: $0.count)
            }
        }
        var total = vectors.reduce(0) { $0 + $1.iov_len }
        var position = offset
        var first = 0
        return withExtendedLifetime(buffers) { () -> Int64? in
            while total > 0 {
                let written = vectors[first...].withUnsafeBufferPointer { slice in
                    pwritev(descriptor, slice.baseAddress, Int32(min(slice.count, 1024)), off_t(position))
                }
                if written < 0 {
                    if errno == EINTR { continue }
                    return nil
                }
                total -= written
                position += Int64(written)
                skip(written, in: &vectors, from: &first)
            }
            return position
        }
    }

    /// Moves past `count` written bytes; a partial write may end inside a vector.
    private static func skip(_ count: Int, in vectors: inout [iovec], from first: inout Int) {
        var left = count
        while left > 0, first < vectors.count {
            if left >= vectors[first].iov_len {
                left -= vectors[first].iov_len
                first += 1
            } else {
                vectors[first].iov_base += left
                vectors[first].iov_len -= left
                left = 0
            }
        }
    }
}
