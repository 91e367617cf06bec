import Foundation

@testable import Haul

/// Tasks as the store tests of several targets add them: a plain record and the re-add that
/// changes nothing.
package enum StoreRecords {
    package static func record(
        _ url: String,
        into directory: String,
        name: String? = nil,
        session: String = "default"
    )
        -> TaskRecord
    {
        TaskRecord(
            id: UUID(),
            url: URL(string: url)!,
            destination: Destination(directory: directory, fileName: name),
            explicitName: name != nil,
            requestHeaders: [],
            checksum: nil,
            overwrite: false,
            session: session,
            background: true,
            now: Date()
        )
    }

    package static let plainReAdd = TaskReAdd(
        background: true,
        session: "default",
        requestHeaders: [],
        checksum: nil,
        overwrite: false,
        connections: nil,
        minSplitSize: nil,
        rateLimit: nil,
        tls: TLSOptions(),
        proxy: .direct,
        credentials: .none,
        cookies: .standard,
        allowsMetered: true,
        checkNewer: false,
        continuesExisting: false,
        hooks: .none
    )
}
