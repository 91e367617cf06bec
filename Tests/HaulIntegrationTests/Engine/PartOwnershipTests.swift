import CHaulSystem
import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

/// A part file belongs to exactly one task, and Haul never writes into a file it did not
/// create: a user's `NAME.part`, a hard or symbolic link, another download's part file, a
/// finished download that happens to be named `NAME.part`.
@Suite("Part files belong to one task", .timeLimit(.minutes(10)))
struct PartOwnershipTests {
    static let size = 2 << 20

    @Test("a NAME.part Haul did not create is left as it is; the download uses a part file of its own")
    func foreignPartFileKept() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size))
            let users = [UInt8](repeating: 0x42, count: 300_000)
            try Data(users).write(to: URL(fileURLWithPath: temp.file("f.bin.part")))
            let result = try await fetch(server, "/f.bin", with: downloader, into: temp.path)
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(FileManager.default.contents(atPath: temp.file("f.bin.part")) == Data(users))
            #expect(server.requests(for: "/f.bin").map { $0.header("Range") } == [nil])
        }
    }

    @Test("a NAME.part another task records, its file gone, stays that task's: a new download claims another name")
    func partNameRecordedByAnotherTask() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/other.bin", .init(size: Self.size))
            // Held at 2 MiB until it is paused: running when the pause comes, however slow the machine.
            server.set("/f.bin", .init(size: 4 << 20, holdAt: 2 << 20))
            // Another task's record names f.bin.part; its file is not there (it may make it again).
            var other = try await downloader.prepare(
                DownloadRequest(url: server.url("/other.bin"), destination: .file(temp.file("other.bin")))
            ).record
            other.partPath = temp.file("f.bin.part")
            other.partIdentity = "0:0"
            try await downloader.store.adopt(other, segments: [])

            let task = try await downloader.download(
                DownloadRequest(url: server.url("/f.bin"), destination: .directory(temp.path))
            )
            #expect(try await waitUntil { task.progress.bytesReceived > 1 << 20 })
            // "running" went to the store with the response and the part file, in one transaction.
            let running = try #require(try await downloader.store.task(id: task.id))
            #expect(running.state == .running)
            #expect(running.partPath != nil && running.totalLength == 4 << 20)
            let paused = try await task.pause()
            let mine = try #require(paused.partPath)
            #expect(mine != temp.file("f.bin.part"))
            #expect(mine.hasPrefix(temp.file("f.bin.")) && mine.hasSuffix(".part"))
            #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin.part")))
            #expect(try await downloader.store.task(id: other.id)?.partPath == temp.file("f.bin.part"))

            server.release("/f.bin")
            let result = try await downloader.download(resumingFrom: paused).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(try await downloader.store.task(id: other.id)?.partPath == temp.file("f.bin.part"))
        }
    }

    @Test("a NAME.part that is a hard link or a symbolic link to another file never changes that file")
    func linkedPartFiles() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/h.bin", .init(size: Self.size))
            server.set("/s.bin", .init(size: Self.size))
            let precious = Data([UInt8](repeating: 0x37, count: 100_000))
            try precious.write(to: URL(fileURLWithPath: temp.file("precious")))
            #expect(link(temp.file("precious"), temp.file("h.bin.part")) == 0)
            #expect(symlink(temp.file("precious"), temp.file("s.bin.part")) == 0)
            for name in ["h.bin", "s.bin"] {
                let result = try await fetch(server, "/\(name)", with: downloader, into: temp.path)
                #expect(sha256(file: result.path) == server.sha256("/\(name)"))
            }
            #expect(FileManager.default.contents(atPath: temp.file("precious")) == precious)
        }
    }

    @Test("a finished download named y.bin.part is not consumed by the download of y.bin")
    func finishedFileNamedLikeAPart() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/y.bin.part", .init(size: Self.size, seed: 11))
            server.set("/y.bin", .init(size: Self.size, seed: 12))
            let first = try await fetch(server, "/y.bin.part", with: downloader, into: temp.path)
            #expect(first.path == temp.file("y.bin.part"))
            let second = try await fetch(server, "/y.bin", with: downloader, into: temp.path)
            #expect(sha256(file: second.path) == server.sha256("/y.bin"))
            #expect(sha256(file: temp.file("y.bin.part")) == server.sha256("/y.bin.part"))
        }
    }

    @Test(
        "two URLs saved under one name: each keeps its own part file and neither file is mixed",
        arguments: [1, 4]
    )
    func twoURLsOneName(connections: Int) async throws {
        try await withHarness { server, downloader, temp in
            // Held at 3 MiB until both are paused: each under way at its pause (past 2 MiB with one
            // connection or with several), however slow the machine.
            server.set("/a.bin", .init(size: 8 << 20, seed: 21, holdAt: 3 << 20))
            server.set("/b.bin", .init(size: 8 << 20, seed: 22, holdAt: 3 << 20))
            let destination = Destination.file(temp.file("same.bin"))
            func start(_ path: String) async throws -> DownloadTask {
                try await downloader.download(
                    DownloadRequest(
                        url: server.url(path),
                        destination: destination,
                        connections: connections,
                        minSplitSize: 256 << 10
                    )
                )
            }
            // A is interrupted, then B runs under the same name and is interrupted too.
            let a = try await start("/a.bin")
            #expect(try await waitUntil { a.progress.bytesReceived > 1 << 20 })
            let resumeA = try await a.pause()
            let b = try await start("/b.bin")
            #expect(try await waitUntil { b.progress.bytesReceived > 2 << 20 })
            let resumeB = try await b.pause()
            #expect(resumeA.partPath != resumeB.partPath)

            server.release()
            let finishedA = try await downloader.download(resumingFrom: resumeA).result()
            #expect(sha256(file: finishedA.path) == server.sha256("/a.bin"))
            #expect(finishedA.resumedFrom == resumeA.bytesCommitted)
            // B finds A's finished file in its place and refuses to replace it.
            let error = await expectHaulError(.destinationExists) {
                _ = try await downloader.download(resumingFrom: resumeB).result()
            }
            #expect(error?.path == temp.file("same.bin"))
            #expect(sha256(file: temp.file("same.bin")) == server.sha256("/a.bin"))
        }
    }

    @Test("a part file replaced by another program is left alone and the download starts over")
    func partReplacedWhilePaused() async throws {
        try await withHarness { server, downloader, temp in
            server.set("/f.bin", .init(size: Self.size))
            let resumeData = try seedPartial(
                server,
                "/f.bin",
                into: temp.path,
                name: "f.bin",
                committed: 1 << 20,
                validators: Validators(etag: "\"v1-1\"", totalLength: Int64(Self.size))
            )
            let theirs = Data([UInt8](repeating: 0x99, count: 1 << 20))
            try FileManager.default.removeItem(atPath: temp.file("f.bin.part"))
            try theirs.write(to: URL(fileURLWithPath: temp.file("f.bin.part")))
            let result = try await downloader.download(resumingFrom: resumeData).result()
            #expect(sha256(file: result.path) == server.sha256("/f.bin"))
            #expect(result.bytesFetched == Int64(Self.size))
            #expect(FileManager.default.contents(atPath: temp.file("f.bin.part")) == theirs)
        }
    }

    @Test(
        "without extended attributes (ramfs), a part file is known by its inode: found again from a record another machine made (another device number), a replaced file refused",
        .enabled(if: getuid() == 0)
    )
    func identityAcrossMachines() async throws {
        let temp = try TemporaryDirectory()
        let mountPoint = try temp.directory("ramfs")
        guard try await Fixtures.run("/bin/mount", ["-t", "ramfs", "ramfs", mountPoint]) == 0 else {
            // Some containers forbid mounting even as root; nothing to test there.
            if ExternalServer.isCI { Issue.record("cannot mount a ramfs in CI") }
            return
        }
        do {
            try Self.findsPartFilesByInode(in: mountPoint)
        } catch {
            _ = try await Fixtures.run("/bin/umount", [mountPoint])
            throw error
        }
        _ = try await Fixtures.run("/bin/umount", [mountPoint])
    }

    static func findsPartFilesByInode(in mountPoint: String) throws {
        let owner = UUID()
        let path = mountPoint + "/f.bin.part"
        let made = try PartFile.create(at: path, owner: owner)
        let identity = try #require(made.identity)
        made.close()
        // The premise: no extended attributes here, so the store's record is the proof.
        let descriptor = open(path, O_RDONLY)
        #expect(chaul_fsetxattr(descriptor, PartFile.ownerAttribute, [1], 1) != 0 && errno == EOPNOTSUPP)
        close(descriptor)
        let inode = try #require(identity.split(separator: ":").last)
        // Recorded by a node on another machine: the share has another device number there.
        let elsewhere = "4242:\(inode)"
        #expect(elsewhere != identity)
        let reopened = try PartFile.openOwned(at: path, owner: owner, identity: elsewhere)
        reopened.close()
        // Nothing recorded, or another file put in its place: not Haul's to write.
        #expect(throws: PartFile.Claim.self) { try PartFile.openOwned(at: path, owner: owner, identity: nil) }
        try FileManager.default.removeItem(atPath: path)
        try Data("theirs".utf8).write(to: URL(fileURLWithPath: path))
        #expect(throws: PartFile.Claim.self) { try PartFile.openOwned(at: path, owner: owner, identity: elsewhere) }
        #expect(!FileIdentity.same("1:2", "1:3") && FileIdentity.same("1:2", "7:2") && !FileIdentity.same("x", "1:2"))
    }

    @Test(
        "a part file is deleted through its own locked handle: a reopening to delete it after the close finds the lock still held while another reference to the file (an fsync in flight) lives"
    )
    func deleteUnderItsOwnLock() throws {
        let temp = try TemporaryDirectory()
        let owner = UUID()
        /// A second reference to the open file, as a sync still running on another thread holds one.
        func holdOpen(_ path: String) throws -> Int32 {
            let fds = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd").compactMap { Int32($0) }
            let fd = try #require(
                fds.first {
                    (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\($0)")) == path
                }
            )
            return dup(fd)
        }

        let reopened = temp.file("reopened.part")
        let first = try PartFile.create(at: reopened, owner: owner)
        let identity = first.identity
        let held = try holdOpen(reopened)
        first.close()
        PartFile.remove(at: reopened, owner: owner, identity: identity)
        #expect(FileManager.default.fileExists(atPath: reopened), "the hazard: the lock outlives the close")
        close(held)
        PartFile.remove(at: reopened, owner: owner, identity: identity)
        #expect(!FileManager.default.fileExists(atPath: reopened), "once the other reference is gone, it goes")

        let deleted = temp.file("deleted.part")
        let second = try PartFile.create(at: deleted, owner: owner)
        let stillHeld = try holdOpen(deleted)
        second.delete()
        second.close()
        close(stillHeld)
        #expect(!FileManager.default.fileExists(atPath: deleted))
    }
}
