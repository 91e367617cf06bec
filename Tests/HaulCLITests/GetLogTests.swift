import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul
@testable import HaulCLI

/// The write-ahead log `haul get` leaves in its store, and folds in once it has grown
/// (``Store/foldLog(ifLargerThan:)``, `HaulCommand.Get.largestLog`).
@Suite("haul get's kept log", .timeLimit(.minutes(2)))
struct GetLogTests {
    @Test("get folds the store's kept write-ahead log in at its end once it has passed 1 MiB, and keeps a smaller one")
    func foldsALargeLog() async throws {
        let temp = try TemporaryDirectory()
        let home = temp.file("home")
        let path = home + "/haul.sqlite"
        try FileManager.default.createDirectory(atPath: home, withIntermediateDirectories: true)
        // Earlier gets' tasks, their log left in place as a get leaves it.
        let store = try Store(path: path, readers: .serial)
        var index = 0
        while fileSize(path + "-wal") <= Int(HaulCommand.Get.largestLog) {
            let record = StoreRecords.record("http://h/\(index).bin", into: temp.path, name: "\(index).bin")
            _ = try await store.insert(record, segments: [])
            index += 1
        }
        try store.writer.close()
        #expect(fileSize(path + "-wal") > Int(HaulCommand.Get.largestLog))
        try await TestServer.withServer { server in
            server.set("/a.bin", .init(size: 1000))
            for name in ["a.bin", "b.bin"] {
                let result = try await HaulProcess.run(
                    ["get", "-q", "-o", name, server.url("/a.bin").absoluteString],
                    home: home,
                    directory: temp.path
                )
                #expect(result.status == 0, "\(result.stderr)")
                #expect(sha256(file: temp.file(name)) == server.sha256("/a.bin"))
            }
        }
        // The first get folded the log in; the second's own writes, under 1 MiB, are kept.
        #expect(fileSize(path + "-wal") > 0)
        #expect(fileSize(path + "-wal") < Int(HaulCommand.Get.largestLog))
        let again = try Store(path: path, readers: .serial)
        #expect(try await again.allTasks().count == index + 2)
    }
}
