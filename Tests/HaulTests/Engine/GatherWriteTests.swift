import Foundation
import HaulTestSupport
import NIOCore
import Testing

@testable import Haul

/// Buffers written back to back into a file at an offset (``GatherWrite``), as a download's
/// batches are.
@Suite("Gathered writes", .timeLimit(.minutes(1)))
struct GatherWriteTests {
    @Test("more buffers than one call takes (1,024), of uneven sizes, land byte for byte after the offset")
    func manyBuffers() throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("f")
        let fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0o600)
        try #require(fd >= 0)
        defer { close(fd) }
        var expected = [UInt8](repeating: 0, count: 100)
        var buffers: [ByteBuffer] = []
        for index in 0..<2_500 {
            let bytes = (0..<(index % 7 + 1)).map { UInt8(truncatingIfNeeded: index &* 31 &+ $0) }
            expected += bytes
            // Each a slice that does not start at its storage's start, as a network read may be.
            var buffer = ByteBuffer(bytes: [0xFF] + bytes)
            buffer.moveReaderIndex(forwardBy: 1)
            buffers.append(buffer)
        }
        let end = GatherWrite.write(buffers, to: fd, at: 100)
        #expect(end == Int64(expected.count))
        #expect(Array(try Data(contentsOf: URL(fileURLWithPath: path))) == expected)
    }

    @Test("a failed call answers nil with errno set")
    func failure() {
        errno = 0
        #expect(GatherWrite.write([ByteBuffer(bytes: [1, 2, 3])], to: -1, at: 0) == nil)
        #expect(errno == EBADF)
    }

    @Test("nothing to write writes nothing and ends where it began")
    func empty() {
        #expect(GatherWrite.write([], to: -1, at: 42) == 42)
        #expect(GatherWrite.write([ByteBuffer()], to: -1, at: 7) == 7)
    }
}
