import Foundation
import HaulTestSupport
import HaulTesting
import Testing

/// The content every test server serves: the same bytes for the same seed and version, on
/// every machine and run, so the hashes the tests compare are stable.
@Suite("Test support: deterministic content, a bounded number of tests at once", .timeLimit(.minutes(1)))
struct TestContentTests {
    @Test("the bytes are xorshift64* words in little-endian order; a shorter count is a prefix")
    func wordsInOrder() {
        let thirteen = TestContent.bytes(count: 13, seed: 1)
        #expect(thirteen == [0x54, 0x92, 0x04, 0xD5, 0x24, 0xE0, 0xDF, 0xB8, 0xB0, 0x18, 0x5C, 0x28, 0x89])
        #expect(TestContent.bytes(count: 5, seed: 1) == Array(thirteen.prefix(5)))
        #expect(TestContent.bytes(count: 0, seed: 1).isEmpty)
    }

    @Test("another seed or version gives other bytes")
    func seedAndVersion() {
        let base = TestContent.bytes(count: 64, seed: 7)
        #expect(TestContent.bytes(count: 64, seed: 8) != base)
        #expect(TestContent.bytes(count: 64, seed: 7, version: 2) != base)
        #expect(TestContent.bytes(count: 64, seed: 7) == base)
    }

    @Test("the test process runs a bounded number of tests at once: eight per core unless set")
    func boundedWidth() {
        let set = ProcessInfo.processInfo.environment["SWT_EXPERIMENTAL_MAXIMUM_PARALLELIZATION_WIDTH"]
        #expect(set != nil)
        #expect(testParallelizationWidth == Int(set ?? "") ?? -1)
        #expect(testParallelizationWidth > 0)
    }
}
