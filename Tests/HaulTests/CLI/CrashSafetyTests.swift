import Foundation
import HaulTesting
import Testing

@testable import Haul

/// `haul get` killed with SIGKILL at chosen moments; the same command run again must finish
/// with the right bytes, continuing from the committed offset.
@Suite("Crash safety (kill -9)", .serialized)
struct CrashSafetyTests {
    enum KillPoint: String, CaseIterable, Sendable {
        /// Before any checkpoint: nothing committed, the rerun starts from 0.
        case beforeFirstCheckpoint
        /// Right after a checkpoint reached the store.
        case rightAfterCheckpoint
        /// After bytes were written past the last checkpoint, before the next one.
        case betweenWriteAndCheckpoint
    }

    static let size = 24 << 20

    @Test(arguments: KillPoint.allCases)
    func killNineThenRerun(point: KillPoint) async throws {
        let temp = try TemporaryDirectory()
        let home = try temp.directory("home")
        let out = try temp.directory("out")
        try await TestServer.withServer { server in
            server.set("/big.bin", .init(size: Self.size, bytesPerSecond: 6 << 20))
            let arguments = [
                "get", "-q", "-d", out, "--checkpoint-interval", point == .beforeFirstCheckpoint ? "10" : "0.25",
                server.url("/big.bin").absoluteString,
            ]
            let child = try HaulProcess(arguments, home: home)

            // Wait for the child to create its store before opening it here.
            #expect(try await waitUntil { server.bodyBytesSent("/big.bin") > 0 })
            let store = try Store(path: (home as NSString).appendingPathComponent("haul.sqlite"))
            func committed() async throws -> Int64 {
                guard let task = try await store.allTasks().first else { return 0 }
                return try await store.segments(of: task.id).first?.committed ?? 0
            }
            switch point {
            case .beforeFirstCheckpoint:
                #expect(try await waitUntil { server.bodyBytesSent("/big.bin") >= 256 << 10 })
            case .rightAfterCheckpoint:
                #expect(try await waitUntil { try await committed() > 0 })
            case .betweenWriteAndCheckpoint:
                let first = try await waitUntil { try await committed() > 0 }
                #expect(first)
                let mark = try await committed()
                #expect(try await waitUntil { server.bodyBytesSent("/big.bin") >= Int(mark) + (512 << 10) })
            }
            child.kill(SIGKILL)
            let killed = await child.finish()
            #expect(killed.status == SIGKILL)

            let atKill = try await committed()
            switch point {
            case .beforeFirstCheckpoint: #expect(atKill == 0)
            case .rightAfterCheckpoint, .betweenWriteAndCheckpoint: #expect(atKill > 0)
            }
            #expect(atKill < Int64(Self.size))
            #expect(!FileManager.default.fileExists(atPath: (out as NSString).appendingPathComponent("big.bin")))

            server.update("/big.bin") { $0.bytesPerSecond = nil }
            let requestsBefore = server.requests(for: "/big.bin").count
            let rerun = try await HaulProcess.run(arguments, home: home)
            #expect(rerun.status == 0, "\(rerun.stderr)")
            #expect(sha256(file: (out as NSString).appendingPathComponent("big.bin")) == server.sha256("/big.bin"))
            let resumed = server.requests(for: "/big.bin").dropFirst(requestsBefore)
            #expect(resumed.count == 1)
            if atKill > 0 {
                #expect(resumed.first?.header("Range") == "bytes=\(atKill)-")
                #expect(resumed.first?.header("If-Range") == "\"v1-1\"")
            } else {
                #expect(resumed.first?.header("Range") == nil)
            }
        }
    }
}
