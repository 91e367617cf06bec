import Foundation
import GRDB
import HaulTestSupport
import Testing

@testable import Haul
@testable import HaulCLI

/// `haul get` opens its store while its arguments are parsed; the command takes that store when
/// it needs the same one, and meets the opening's error as its own.
@Suite("The store opened ahead for haul get", .serialized, .timeLimit(.minutes(1)))
struct StoreHeadStartTests {
    @Test("the words say which readers get will want, and when it wants no store at all")
    func readersFromTheWords() {
        func readers(_ words: String) -> Store.Readers? {
            StoreHeadStart.readers(for: ArraySlice(words.split(separator: " ").map(String.init)))
        }
        #expect(readers("-q -d out http://h/a") == .serial)
        #expect(readers("-x 8 --limit-rate 20M https://h/a") == .serial)
        #expect(readers("http://h/a http://h/b") == .concurrent)
        #expect(readers("-d out -j 4 -i urls.txt") == .concurrent)
        #expect(readers("--input-file=urls.txt") == .concurrent)
        #expect(readers("-M files.meta4 -d /data") == .concurrent)
        #expect(readers("-- http://h/a") == .serial, "after --, every word is a URL")
        #expect(readers("-- http://h/a -") == .serial)
        #expect(readers("-o - http://h/a") == nil, "stdout: no store is opened")
        #expect(readers("--output=- http://h/a") == nil)
        #expect(readers("--output - http://h/a") == nil)
        #expect(readers("--help") == nil)
        #expect(readers("-h") == nil)
    }

    @Test("the opening's result reaches get whether the opening ends before get asks or after")
    func resultEitherWay() async throws {
        let store = try Store.inMemory()
        let toldFirst = StoreHeadStart.Outcome()
        toldFirst.tell(.success(store))
        #expect(try await toldFirst.value === store)

        let askedFirst = StoreHeadStart.Outcome()
        let waiting = Task { try await askedFirst.value }
        // Told once the asker waits for it.
        while !askedFirst.isAwaited { await Task.yield() }
        askedFirst.tell(.failure(HaulError(.store, "Cannot open the Haul store")))
        await #expect(throws: HaulError.self) { try await waiting.value }
    }

    @Test("get takes the store opened for its path and readers, once; for other readers it opens its own")
    func takenWhenItMatches() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("home/haul.sqlite")
        StoreHeadStart.begin(for: ["http://h/a"], path: path)
        let store = try #require(try await StoreHeadStart.take(path: path, readers: .serial))
        #expect(store.writer is DatabaseQueue, "opened with the readers the words asked for")
        #expect(FileManager.default.fileExists(atPath: path), "the new store is in place")
        #expect(try await StoreHeadStart.take(path: path, readers: .serial) == nil, "taken once")

        StoreHeadStart.begin(for: ["http://h/a"], path: path)
        #expect(try await StoreHeadStart.take(path: path, readers: .concurrent) == nil)
        StoreHeadStart.begin(for: ["http://h/a"], path: path)
        #expect(try await StoreHeadStart.take(path: temp.file("other.sqlite"), readers: .serial) == nil)
        StoreHeadStart.begin(for: ["-o", "-", "http://h/a"], path: temp.file("none/haul.sqlite"))
        #expect(try await StoreHeadStart.take(path: temp.file("none/haul.sqlite"), readers: .serial) == nil)
        #expect(!FileManager.default.fileExists(atPath: temp.file("none")), "nothing made for -o -")
    }

    @Test("the opening's error is the one get would have met, thrown where get takes the store")
    func errorThrownAtTake() async throws {
        let temp = try TemporaryDirectory()
        let path = temp.file("haul.sqlite")
        try Data("not a database".utf8).write(to: URL(fileURLWithPath: path))
        StoreHeadStart.begin(for: ["http://h/a"], path: path)
        let error = await #expect(throws: HaulError.self) {
            try await StoreHeadStart.take(path: path, readers: .serial)
        }
        let own = #expect(throws: HaulError.self) { try Store(path: path, readers: .serial) }
        #expect(error?.description == own?.description)
        #expect(error?.description.contains("not a SQLite database") == true, "\(error?.description ?? "")")
    }
}
