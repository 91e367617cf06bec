import Foundation
import Testing

@testable import Haul

/// The sources of one download shared by its connections: what a lost vote drops, when two
/// connections count it at once.
@Suite("Source pool", .timeLimit(.minutes(1)))
struct SourcePoolTests {
    static func pool(mirrors: Int) -> SourcePool {
        let urls = (0...mirrors).map { URL(string: "http://127.0.0.1:\(8000 + $0)/f.bin")! }
        return SourcePool(urls.map { DownloadSource(url: $0) }, perSourceCap: 4)
    }

    @Test("the file outvoted: its verified sources are dropped once, and a second count learns it was done")
    func outvotedTwice() {
        let pool = Self.pool(mirrors: 2)
        pool.verified(1, validators: Validators())
        let before = pool.signal.generation
        #expect(pool.outvoteFile(reason: "its bytes differ") == .dropped([0, 1]))
        #expect(pool.signal.generation > before, "connections waiting for a source look again")
        #expect(pool.snapshot.map(\.dropped) == ["its bytes differ", "its bytes differ", nil])
        #expect(pool.outvoteFile(reason: "its bytes differ") == .alreadyDropped)
        #expect(pool.snapshot.map(\.dropped) == ["its bytes differ", "its bytes differ", nil])
    }

    @Test("the file outvoted by sources dropped meanwhile: it stands, nothing is dropped")
    func outvotersGone() {
        let pool = Self.pool(mirrors: 1)
        #expect(pool.drop(1, reason: "404"))
        #expect(pool.outvoteFile(reason: "its bytes differ") == .kept)
        #expect(pool.isActive(0))
    }
}
