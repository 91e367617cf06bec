import Foundation
import Testing

@testable import Haul

/// The range of ids a GID (or a prefix of one) names, as a store reads it from its index.
@Suite("Id prefixes: the ids a GID names")
struct IDPrefixTests {
    @Test("a prefix of any length names exactly the ids that begin with it; anything else names none")
    func ranges() throws {
        let id = UUID(uuidString: "AB12CD34-EF56-7890-1234-567890ABCDEF")!
        let odd = try #require(IDPrefix(hex: "ab1"))
        #expect(odd.lowest == UUID(uuidString: "AB100000-0000-0000-0000-000000000000"))
        #expect(odd.highest == UUID(uuidString: "AB1FFFFF-FFFF-FFFF-FFFF-FFFFFFFFFFFF"))
        for hex in ["a", "AB", "ab12cd34", "ab12cd34ef567890", "AB12CD34EF5678901234567890ABCDEF"] {
            let prefix = try #require(IDPrefix(hex: hex), "\(hex)")
            #expect(prefix.contains(id), "\(hex)")
            #expect(!prefix.contains(UUID(uuidString: "BB12CD34-EF56-7890-1234-567890ABCDEF")!), "\(hex)")
        }
        #expect(IDPrefix(hex: "ab12cd34ef567891")?.contains(id) == false)
        for bad in ["", "g", "ab-1", String(repeating: "a", count: 33), "é"] {
            #expect(IDPrefix(hex: bad) == nil, "\(bad)")
        }
    }
}
