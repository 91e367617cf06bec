import Foundation

/// Where the tests find the repository's own files, and the Python environment `.ci/run`
/// makes for the tests that drive real clients (aria2p, websockets, prometheus_client,
/// schemathesis, selenium).
package enum TestPaths {
    /// The repository's root (this file is Tests/HaulTestSupport/TestPaths.swift).
    package static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// A file of the repository, by its path from the root.
    package static func file(_ relative: String) -> String {
        repository.appendingPathComponent(relative).path
    }

    /// `.build/test-python/bin/python3`, when `.ci/run` (or a developer) made it.
    package static var python: String? {
        let python = file(".build/test-python/bin/python3")
        return FileManager.default.isExecutableFile(atPath: python) ? python : nil
    }
}
