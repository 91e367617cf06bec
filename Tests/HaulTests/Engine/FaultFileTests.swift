import Foundation
import HaulClient
import HaulTestSupport
import HaulTesting
import HaulWire
import HaulWireMapping
import Testing

@testable import Haul

extension FaultTests {
    /// What a pause, a cancel or a crash leaves on disk, resume data carried elsewhere, and files that are not the download's.
    @Suite("Server faults: pauses, resume data and files in the way")
    struct Files {
        @Test(
            "cancelling the task that awaits a download pauses it: data kept, resume data thrown, the rest fetched later"
        )
        func callerCancellationPauses() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 4 << 20, bytesPerSecond: 4 << 20))
                let request = DownloadRequest(url: server.url("/f.bin"), destination: .directory(temp.path))
                let task = try await downloader.download(request)
                let waiter = Task { try await task.result() }
                #expect(try await waitUntil { task.progress.bytesReceived > 1 << 20 })
                waiter.cancel()
                let error = await expectHaulError(.paused) { _ = try await waiter.value }
                let resumeData = try #require(error?.resumeData)
                #expect(resumeData.bytesCommitted >= 1 << 20)
                #expect(try await downloader.store.task(id: task.id)?.state == .paused)
                #expect(FileManager.default.fileExists(atPath: temp.file("f.bin.part")))

                server.update("/f.bin") { $0.bytesPerSecond = nil }
                let result = try await downloader.download(request).result()
                #expect(sha256(file: result.path) == server.sha256("/f.bin"))
                let ranges = server.requests(for: "/f.bin").compactMap { $0.header("Range") }
                #expect(ranges == [resumeRange(from: resumeData.bytesCommitted)])
            }
        }

        @Test("pause returns resume data that another downloader, on another store, continues")
        func pauseAndResumeElsewhere() async throws {
            let temp = try TemporaryDirectory()
            try await TestServer.withServer { server in
                server.set("/f.bin", .init(size: 4 << 20, bytesPerSecond: 8 << 20))
                let encoded = try await Downloader.withDownloader(
                    configuration: testConfiguration(store: temp.file("a.sqlite"))
                ) {
                    downloader in
                    let task = try await downloader.download(
                        DownloadRequest(url: server.url("/f.bin"), destination: .directory(temp.path))
                    )
                    #expect(try await waitUntil { task.progress.bytesReceived > 1 << 20 })
                    return try await task.pause().encoded()
                }
                let resumeData = try ResumeData(decoding: encoded)
                #expect(resumeData.bytesCommitted >= 1 << 20)
                #expect(FileManager.default.fileExists(atPath: temp.file("f.bin.part")))
                #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin")))
                server.update("/f.bin") { $0.bytesPerSecond = nil }
                try await Downloader.withDownloader(configuration: testConfiguration(store: temp.file("b.sqlite"))) {
                    downloader in
                    let result = try await downloader.download(resumingFrom: resumeData).result()
                    #expect(sha256(file: result.path) == server.sha256("/f.bin"))
                    #expect(result.resumedFrom == resumeData.bytesCommitted)
                }
                #expect(
                    server.requests(for: "/f.bin").last?.header("Range") == resumeRange(from: resumeData.bytesCommitted)
                )
            }
        }

        @Test("cancel removes the part file and records the state")
        func cancelRemovesPart() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 4 << 20, bytesPerSecond: 4 << 20))
                let task = try await downloader.download(
                    DownloadRequest(url: server.url("/f.bin"), destination: .directory(temp.path))
                )
                #expect(try await waitUntil { task.progress.bytesReceived > 100_000 })
                await task.cancel()
                #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin.part")))
                #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin")))
                #expect(try await downloader.store.task(id: task.id)?.state == .cancelled)
            }
        }

        @Test("resume data whose part file is gone starts over instead of leaving a hole")
        func resumeDataWithoutPartFile() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 1 << 20))
                let resumeData = try seedPartial(
                    server,
                    "/f.bin",
                    into: temp.path,
                    name: "f.bin",
                    committed: 500_000,
                    validators: Validators(etag: "\"v1-1\"", totalLength: 1 << 20)
                )
                try FileManager.default.removeItem(atPath: temp.file("f.bin.part"))
                let result = try await downloader.download(resumingFrom: resumeData).result()
                #expect(sha256(file: result.path) == server.sha256("/f.bin"))
                #expect(server.requests(for: "/f.bin").map { $0.header("Range") } == [nil])
            }
        }

        @Test("a second download of the same destination is refused while the first runs, and changes nothing")
        func sameDestinationTwice() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 4 << 20, bytesPerSecond: 8 << 20))
                let request = DownloadRequest(url: server.url("/f.bin"), destination: .file(temp.file("f.bin")))
                let first = try await downloader.download(request)
                #expect(try await waitUntil { first.progress.bytesReceived > 100_000 })
                let error = await expectHaulError(.busy) { _ = try await downloader.download(request).result() }
                #expect(error?.description.contains("Another Haul process") == true)
                server.update("/f.bin") { $0.bytesPerSecond = nil }
                let result = try await first.result()
                #expect(sha256(file: result.path) == server.sha256("/f.bin"))
                #expect(try await downloader.store.task(id: first.id)?.state == .completed)
            }
        }

        @Test(
            "a new download whose NAME.part another run of it has just made, locked, stops at the lock before recording the answer"
        )
        func newDownloadMeetsAnotherRunsPart() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 100_000))
                let request = DownloadRequest(url: server.url("/f.bin"), destination: .file(temp.file("f.bin")))
                // The other run: the task recorded, its NAME.part made and locked, not yet claimed
                // (its answer is on its way), as another process has it between the two.
                let id = try await downloader.prepare(request).record.id
                let other = try PartFile.create(at: temp.file("f.bin.part"), owner: id)
                defer { other.close() }
                let error = await expectHaulError(.busy) { _ = try await downloader.download(request).result() }
                #expect(error?.description.contains("Another Haul process") == true)
                #expect(server.requests(for: "/f.bin").count == 1)
                // Nothing of this run's answer recorded: the task as the other run left it.
                let task = try #require(try await downloader.store.task(id: id))
                #expect(task.validators == Validators())
                #expect(task.partPath == nil)
                #expect(task.state == .queued)
                #expect(FileManager.default.fileExists(atPath: temp.file("f.bin.part")))
            }
        }

        @Test("a new download's NAME.part, made while its request is under way: kept across a retry, gone after a 404")
        func partMadeAhead() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 100_000, failFirst: 1, failStatus: 503, retryAfter: "0"))
                let request = DownloadRequest(url: server.url("/f.bin"), destination: .file(temp.file("f.bin")))
                let result = try await downloader.download(request).result()
                #expect(sha256(file: result.path) == server.sha256("/f.bin"))
                #expect(server.requests(for: "/f.bin").count == 2)
                #expect(
                    try FileManager.default.contentsOfDirectory(atPath: temp.path).filter { $0.hasPrefix("f") } == [
                        "f.bin"
                    ]
                )

                let missing = DownloadRequest(url: server.url("/none.bin"), destination: .file(temp.file("none.bin")))
                _ = await expectHaulError(.httpStatus) { _ = try await downloader.download(missing).result() }
                #expect(
                    try FileManager.default.contentsOfDirectory(atPath: temp.path).filter { $0.hasPrefix("none") } == []
                )
            }
        }

        @Test("a crash between the rename and recording completion: the rerun recognises the file as its own")
        func crashAfterRename() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 1 << 20))
                let request = DownloadRequest(url: server.url("/f.bin"), destination: .file(temp.file("f.bin")))
                let prepared = try await downloader.prepare(request)
                var record = prepared.record
                record.state = .running
                record.validators = Validators(etag: "\"v1-1\"", totalLength: 1 << 20)
                try await downloader.store.adopt(
                    record,
                    segments: [SegmentRecord(taskID: record.id, ordinal: 0, start: 0, end: 1 << 20, committed: 1 << 20)]
                )
                _ = FileManager.default.createFile(atPath: temp.file("f.bin"), contents: Data(server.content("/f.bin")))

                let result = try await downloader.download(request).result()
                #expect(result.alreadyComplete)
                #expect(sha256(file: result.path) == server.sha256("/f.bin"))
                #expect(server.requests(for: "/f.bin").isEmpty)
                #expect(try await downloader.store.task(id: record.id)?.state == .completed)
            }
        }

        @Test(
            "a crash between the rename and the completion that records the last checkpoint: the file is recognised by its inode"
        )
        func crashAfterRenameBeforeLastCheckpoint() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 1 << 20))
                let destination = temp.file("f.bin")
                // The part file, synced whole and moved into place; its last checkpoint (half the
                // file committed before it) was to be recorded with the completion.
                _ = FileManager.default.createFile(atPath: destination, contents: Data(server.content("/f.bin")))
                let request = DownloadRequest(url: server.url("/f.bin"), destination: .file(destination))
                var record = try await downloader.prepare(request).record
                record.state = .running
                record.validators = Validators(etag: "\"v1-1\"", totalLength: 1 << 20)
                record.partPath = destination + ".part"
                record.partIdentity = FileIdentity.at(destination)
                try await downloader.store.adopt(
                    record,
                    segments: [SegmentRecord(taskID: record.id, ordinal: 0, start: 0, end: 1 << 20, committed: 1 << 19)]
                )

                let result = try await downloader.download(request).result()
                #expect(result.alreadyComplete)
                #expect(sha256(file: result.path) == server.sha256("/f.bin"))
                #expect(server.requests(for: "/f.bin").isEmpty)
                #expect(try await downloader.store.task(id: record.id)?.state == .completed)
            }
        }

        @Test("a stranger's file of the right length where the part file was is refused unless it is that file")
        func strangerFileOfTheRightLength() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 1 << 20))
                let destination = temp.file("f.bin")
                // The part file the store names, then gone; another file of the same length in place.
                _ = FileManager.default.createFile(atPath: destination + ".part", contents: Data(count: 1 << 20))
                let partIdentity = try #require(FileIdentity.at(destination + ".part"))
                let request = DownloadRequest(url: server.url("/f.bin"), destination: .file(destination))
                var record = try await downloader.prepare(request).record
                record.validators = Validators(etag: "\"v1-1\"", totalLength: 1 << 20)
                record.partPath = destination + ".part"
                record.partIdentity = partIdentity
                try await downloader.store.adopt(
                    record,
                    segments: [SegmentRecord(taskID: record.id, ordinal: 0, start: 0, end: 1 << 20, committed: 1 << 19)]
                )
                let stranger = Data(repeating: 7, count: 1 << 20)
                _ = FileManager.default.createFile(atPath: destination, contents: stranger)
                try FileManager.default.removeItem(atPath: destination + ".part")
                #expect(FileIdentity.at(destination) != partIdentity)

                await expectHaulError(.destinationExists) { _ = try await downloader.download(request).result() }
                #expect(FileManager.default.contents(atPath: destination) == stranger)
            }
        }

        @Test("a file that appears at the destination while the download runs is not replaced")
        func fileAppearsWhileDownloading() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 1 << 20, holdAt: 1 << 19))
                let request = DownloadRequest(url: server.url("/f.bin"), destination: .file(temp.file("f.bin")))
                let task = try await downloader.download(request)
                #expect(try await waitUntil { task.progress.bytesReceived >= 1 << 19 })
                let stranger = Data("someone else's".utf8)
                _ = FileManager.default.createFile(atPath: temp.file("f.bin"), contents: stranger)
                server.release("/f.bin")
                // Refused by the rename into place, which never replaces a file unless asked.
                let error = await expectHaulError(.destinationExists) { _ = try await task.result() }
                #expect(error?.url == server.url("/f.bin") && error?.path == temp.file("f.bin"))
                #expect(FileManager.default.contents(atPath: temp.file("f.bin")) == stranger)
                #expect(fileSize(temp.file("f.bin.part")) == 1 << 20, "the finished part file is kept")
            }
        }

        @Test("a stranger's file of another length at the destination is still refused")
        func strangerFileRefused() async throws {
            try await withHarness { server, downloader, temp in
                server.set("/f.bin", .init(size: 1 << 20))
                let request = DownloadRequest(url: server.url("/f.bin"), destination: .file(temp.file("f.bin")))
                let prepared = try await downloader.prepare(request)
                var record = prepared.record
                record.validators = Validators(etag: "\"v1-1\"", totalLength: 1 << 20)
                try await downloader.store.adopt(
                    record,
                    segments: [SegmentRecord(taskID: record.id, ordinal: 0, start: 0, end: 1 << 20, committed: 1 << 20)]
                )
                _ = FileManager.default.createFile(atPath: temp.file("f.bin"), contents: Data("not ours".utf8))
                await expectHaulError(.destinationExists) { _ = try await downloader.download(request).result() }
                #expect(FileManager.default.contents(atPath: temp.file("f.bin")) == Data("not ours".utf8))
            }
        }
    }
}
