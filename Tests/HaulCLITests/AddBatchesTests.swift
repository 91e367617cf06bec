import Foundation
import Haul
import HaulTestSupport
import HaulTesting
import Synchronization
import Testing

@testable import HaulCLI

/// `haul add`'s batches (``AddBatches``), against a daemon stand-in that records what it
/// was sent: a list of any length goes in order, in batches of at most the size; a batch
/// too large for one request is halved and sent again; a failed batch says what was added
/// before it, numbering the download the daemon named from the list's start.
@Suite("haul add: batches", .timeLimit(.minutes(1)))
struct AddBatchesTests {
    /// A stand-in daemon: adds what it is sent unless `refuse` says why not.
    final class Daemon: Sendable {
        let sent = Mutex<[[URL]]>([])
        let refuse: @Sendable ([DownloadRequest]) -> HaulError?

        init(refuse: @escaping @Sendable ([DownloadRequest]) -> HaulError? = { _ in nil }) {
            self.refuse = refuse
        }

        func add(_ batch: [DownloadRequest]) throws -> [DownloadInfo] {
            sent.withLock { $0.append(batch.map(\.url)) }
            if let error = refuse(batch) { throw error }
            return batch.map { request in
                DownloadInfo(
                    id: UUID(),
                    url: request.url,
                    path: nil,
                    directory: "/d",
                    state: .queued,
                    priority: 0,
                    bytesCommitted: 0,
                    totalBytes: nil,
                    errorMessage: nil,
                    session: "default"
                )
            }
        }
    }

    static func requests(_ count: Int) -> [DownloadRequest] {
        (0..<count).map { DownloadRequest(url: URL(string: "http://h.test/\($0)")!, destination: .directory("/d")) }
    }

    @Test("twelve downloads at five a batch: three requests, every one added once, in order")
    func inOrder() async throws {
        let daemon = Daemon()
        let list = Self.requests(12)
        var heard: [URL] = []
        let added = try await AddBatches(size: 5) { try daemon.add($0) }.run(list) { heard += $0.map(\.url) }
        #expect(added == 12)
        #expect(daemon.sent.withLock { $0.map(\.count) } == [5, 5, 2])
        #expect(heard == list.map(\.url))
    }

    @Test("a batch the daemon finds too large is halved and sent again; none is added twice")
    func halved() async throws {
        // Refuses any request of more than three, as a 16 MiB limit would.
        let daemon = Daemon { batch in
            guard batch.count > 3 else { return nil }
            var error = HaulError(
                .invalidArgument,
                "The request body is larger than 16 MiB; send fewer downloads at once"
            )
            error.status = 413
            return error
        }
        let list = Self.requests(10)
        var heard: [URL] = []
        try await AddBatches(size: 8) { try daemon.add($0) }.run(list) { heard += $0.map(\.url) }
        #expect(daemon.sent.withLock { $0.map(\.count) } == [8, 4, 2, 2, 2, 2, 2])
        #expect(heard == list.map(\.url))
        // One download alone too large: its error, not a loop.
        let error = await #expect(throws: HaulError.self) {
            try await AddBatches(size: 8) { _ in try daemon.add(Self.requests(4)) }.run(Self.requests(1)) { _ in }
        }
        #expect(error?.status == 413)
    }

    @Test(
        "while a batch is on its way the next is made ready and the one before is read; each is sent only once the one before is added"
    )
    func overlapped() async throws {
        let daemon = Daemon()
        let list = Self.requests(12)
        // What was made ready and what was read, by each batch's first URL.
        let (steps, step) = AsyncStream.makeStream(of: String.self)
        let inFlight = Mutex(false)
        var stepsSeen = steps.makeAsyncIterator()
        var seen: Set<String> = []
        func awaitStep(_ name: String) async {
            while !seen.contains(name), let next = await stepsSeen.next() { seen.insert(next) }
        }
        var heard: [URL] = []
        let batches = AddBatches<[DownloadRequest], [DownloadInfo], DownloadInfo>(
            size: 5,
            prepare: { batch in
                step.yield("ready \(batch[0].url.path)")
                return batch
            },
            send: { batch in
                #expect(
                    inFlight.withLock { flying in
                        defer { flying = true }
                        return flying
                    } == false
                )
                defer { inFlight.withLock { $0 = false } }
                // Each wait fails by the suite's time limit if the step never comes.
                let first = list.firstIndex { $0.url == batch[0].url }!
                if first + batch.count < list.count { await awaitStep("ready \(list[first + batch.count].url.path)") }
                if first > 0 { await awaitStep("read \(list[first - 5].url.path)") }
                return try daemon.add(batch)
            },
            read: { tasks in
                step.yield("read \(tasks[0].url.path)")
                return tasks
            }
        )
        try await batches.run(list) { heard += $0.map(\.url) }
        #expect(daemon.sent.withLock { $0.map(\.count) } == [5, 5, 2])
        #expect(heard == list.map(\.url))
        #expect(seen.contains("ready /0") && seen.contains("read /5"))
    }

    @Test("an answer that cannot be read counts every batch the daemon added, the one sent while it was read too")
    func unreadableAnswer() async throws {
        let daemon = Daemon()
        let batches = AddBatches<[DownloadRequest], [DownloadInfo], DownloadInfo>(
            size: 5,
            prepare: { $0 },
            send: { try daemon.add($0) },
            read: { tasks in
                guard tasks[0].url.path != "/5" else { throw HaulError(.invalidResponse, "unreadable") }
                return tasks
            }
        )
        var heard = 0
        let error = await #expect(throws: HaulError.self) {
            try await batches.run(Self.requests(12)) { heard += $0.count }
        }
        #expect(error?.message == "Added 12 of 12 downloads, then: unreadable")
        #expect(heard == 5)
    }

    @Test("a batch that fails says how many were added before it, and counts the download it names from the start")
    func failure() async throws {
        let daemon = Daemon { batch in
            batch.contains { $0.url.path == "/7" } ? HaulError(.invalidArgument, "downloads[2]: not allowed") : nil
        }
        var heard = 0
        let error = await #expect(throws: HaulError.self) {
            try await AddBatches(size: 5) { try daemon.add($0) }.run(Self.requests(12)) { heard += $0.count }
        }
        #expect(error?.message == "Added 5 of 12 downloads, then: downloads[7]: not allowed")
        #expect(error?.hint?.contains("the same command again adds the rest") == true)
        #expect(heard == 5)
        #expect(daemon.sent.withLock { $0.count } == 2, "nothing sent after the failed batch")
        // In the first batch: the daemon's own words.
        let first = AddBatches<[DownloadRequest], [DownloadInfo], DownloadInfo>.failure(
            HaulError(.store, "downloads[3]: cannot be recorded"),
            at: 0,
            batch: 5,
            of: 9
        )
        #expect(first.message == "downloads[3]: cannot be recorded" && first.hint == nil)
        // An index outside the batch (or past any number) is not counted on: left as said.
        let huge = "downloads[9223372036854775807]: no"
        #expect(
            AddBatches<[DownloadRequest], [DownloadInfo], DownloadInfo>.failure(
                HaulError(.store, huge),
                at: 5,
                batch: 5,
                of: 9
            )
            .message.hasSuffix(
                huge
            )
        )
    }

    @Test("--json output written batch by batch is the same text as the whole array's")
    func jsonText() throws {
        let daemon = Daemon()
        let tasks = try daemon.add(Self.requests(3))
        var output = AddOutput(json: true, total: 3, batch: 2)
        let text =
            try output.text(tasks.prefix(2).map(AddedTask.task)) + output.text([.task(tasks[2])]) + output.ending()
        #expect(text == (try DaemonOutput.json(tasks)) + "\n")
        #expect(
            try AddOutput(json: true, total: 0, batch: 2).ending() == (try DaemonOutput.json([DownloadInfo]())) + "\n"
        )
        var ids = AddOutput(json: false, total: 3, batch: 2)
        #expect(
            try ids.text(tasks.map { AddedTask.id($0.id) }) == tasks.map { $0.id.shown + "\n" }.joined()
                && ids.ending().isEmpty
        )
    }

    @Test(
        "haul add -i --batch 2 through a daemon: every id once, in order; the same list again adds nothing new; haul list pages them"
    )
    func throughDaemon() async throws {
        let temp = try TemporaryDirectory()
        let (home, out) = (temp.file("home"), try temp.directory("out"))
        try await TestServer.withServer { server in
            for index in 0..<5 { server.set("/f\(index)", .init(size: 4_000 + index, seed: UInt64(index))) }
            let input = temp.file("list.txt")
            try (0..<5).map { server.url("/f\($0)").absoluteString + "\n" }.joined()
                .write(toFile: input, atomically: true, encoding: .utf8)
            #expect(try await HaulProcess.run(["daemon"], home: home).status == 0)
            let added = try await HaulProcess.run(["add", "--batch", "2", "-d", out, "-i", input], home: home)
            #expect(added.status == 0, "\(added.stderr)")
            let ids = added.stdout.split(separator: "\n").map(String.init)
            #expect(ids.count == 5 && Set(ids).count == 5, "\(added.stdout)")
            #expect(try await HaulProcess.run(["wait"], home: home).status == 0)
            for index in 0..<5 {
                #expect(TestContent.sha256(file: out + "/f\(index)") == server.sha256("/f\(index)"))
            }
            // Again, as JSON: one array of the same tasks, each completed and left so.
            let again = try await HaulProcess.run(
                ["add", "--json", "--batch", "2", "-d", out, "-i", input],
                home: home
            )
            #expect(again.status == 0, "\(again.stderr)")
            let tasks = try #require(
                try JSONSerialization.jsonObject(with: Data(again.stdout.utf8)) as? [[String: Any]],
                "\(again.stdout)"
            )
            #expect(tasks.compactMap { ($0["id"] as? String)?.lowercased() } == ids)
            #expect(tasks.allSatisfy { $0["state"] as? String == "completed" }, "\(again.stdout)")
            #expect((0..<5).allSatisfy { server.requests(for: "/f\($0)").count == 1 }, "each fetched once")
            // haul list a page at a time: it says how to list the next.
            let first = try await HaulProcess.run(["list", "--limit", "2"], home: home)
            #expect(first.status == 0 && first.stdout.split(separator: "\n").count == 3, "\(first.stdout)")
            #expect(first.stderr.contains("More may follow: haul list --limit 2 --after \(ids[1])"), "\(first.stderr)")
            let next = try await HaulProcess.run(["list", "--json", "--limit", "2", "--after", ids[1]], home: home)
            let page = try #require(try JSONSerialization.jsonObject(with: Data(next.stdout.utf8)) as? [[String: Any]])
            #expect(page.compactMap { ($0["id"] as? String)?.lowercased() } == Array(ids[2..<4]))
            let gone = UUID().uuidString.lowercased()
            let afterGone = try await HaulProcess.run(["list", "--limit", "2", "--after", gone], home: home)
            #expect(
                afterGone.status != 0 && afterGone.stderr.contains("No task \(gone) to list after"),
                "\(afterGone.stderr)"
            )
            let refused = try await HaulProcess.run(["add", "--batch", "0", "-i", input], home: home)
            #expect(refused.status == 2 && refused.stderr.contains("--batch takes 1 to 50000"), "\(refused.stderr)")
            _ = try await HaulProcess.run(["daemon", "stop"], home: home)
        }
    }
}
