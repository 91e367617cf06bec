import Foundation
import Testing

extension Tag {
    /// Runs `haul` (or another program) as a child process.
    @Tag package static var process: Self
    /// Needs nginx (or Apache, lighttpd) started by the test.
    @Tag package static var nginx: Self
    /// Takes more than about 20 s alone, or loads the machine on purpose.
    @Tag package static var slow: Self

    /// `HAUL_FAST_TESTS=1 swift test` is the fast loop: it leaves out the suites tagged
    /// `.process`, `.nginx` or `.slow` (this toolchain's `swift test` filters by name only).
    package static let fastLoop = ProcessInfo.processInfo.environment["HAUL_FAST_TESTS"] == "1"
}

extension Trait where Self == ConditionTrait {
    /// Off in the fast loop (see ``Tag/fastLoop``); always on in CI and by default.
    package static var leftOutOfFastLoop: Self {
        .disabled(
            if: Tag.fastLoop && ProcessInfo.processInfo.environment["CI"] == nil,
            "left out of the fast loop (HAUL_FAST_TESTS=1)"
        )
    }
}
