import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// Running out of space, on a real 2 MiB tmpfs. Mounting needs root; elsewhere the test is
/// skipped (the ENOSPC mapping is still checked).
@Suite("Disk full", .tags(.process), .leftOutOfFastLoop, .timeLimit(.minutes(10)))
struct DiskFullTests {
    @Test func enospcIsReportedAsDiskFull() {
        let error = HaulError.fileSystem("write to", path: "/data/x.part", errno: ENOSPC)
        #expect(error.code == .diskFull)
        #expect(
            error.description
                == "No space left on device while trying to write to /data/x.part. Free some space and run the same command again to resume"
        )
    }

    @Test(.enabled(if: getuid() == 0))
    func downloadIntoAFullDisk() async throws {
        let temp = try TemporaryDirectory()
        let mountPoint = try temp.directory("small")
        let mounted = try await Fixtures.run("/bin/mount", ["-t", "tmpfs", "-o", "size=2m", "tmpfs", mountPoint])
        guard mounted == 0 else {
            // Some containers forbid mounting even as root; nothing to test there.
            return
        }
        do {
            try await withHarness { server, downloader, _ in
                server.set("/f.bin", .init(size: 4 << 20))
                let error = await expectHaulError(.diskFull) {
                    _ = try await fetch(server, "/f.bin", with: downloader, into: mountPoint)
                }
                #expect(error?.description.contains("No space left on device") == true)
                #expect(error?.path?.hasPrefix(mountPoint) == true)
                #expect(!FileManager.default.fileExists(atPath: mountPoint + "/f.bin"))
            }
        } catch {
            _ = try await Fixtures.run("/bin/umount", [mountPoint])
            throw error
        }
        _ = try await Fixtures.run("/bin/umount", [mountPoint])
    }

    @Test(
        "haul get into a tmpfs that fills: exit 1 with the reason (never a trap), then a resume once there is room",
        .enabled(if: getuid() == 0),
        arguments: [1, 4]
    )
    func commandIntoAFullDisk(connections: Int) async throws {
        let temp = try TemporaryDirectory()
        let mountPoint = try temp.directory("small")
        guard try await Fixtures.run("/bin/mount", ["-t", "tmpfs", "-o", "size=3m", "tmpfs", mountPoint]) == 0 else {
            return
        }
        do {
            try await TestServer.withServer { server in
                server.set("/f.bin", .init(size: 6 << 20))
                let arguments = [
                    "get", "-x", String(connections), "--min-split", "256K", "-d", mountPoint,
                    server.url("/f.bin").absoluteString,
                ]
                let full = try await HaulProcess.run(arguments, home: temp.file("home"))
                #expect(full.status == 3, "\(full.stderr)")
                #expect(full.stderr.contains("No space left on device"), "\(full.stderr)")
                #expect(full.stderr.split(separator: "\n").last?.hasPrefix("haul: error: ") == true)
                #expect(!FileManager.default.fileExists(atPath: mountPoint + "/f.bin"))

                #expect(try await Fixtures.run("/bin/mount", ["-o", "remount,size=32m", mountPoint]) == 0)
                let before = server.requests(for: "/f.bin").count
                let rerun = try await HaulProcess.run(arguments, home: temp.file("home"))
                #expect(rerun.status == 0, "\(rerun.stderr)")
                #expect(sha256(file: mountPoint + "/f.bin") == server.sha256("/f.bin"))
                // The rerun continued: every request asked for a range.
                #expect(server.requests(for: "/f.bin").dropFirst(before).allSatisfy { $0.header("Range") != nil })
            }
        } catch {
            _ = try await Fixtures.run("/bin/umount", [mountPoint])
            throw error
        }
        _ = try await Fixtures.run("/bin/umount", [mountPoint])
    }

}
