import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// A URL that turns out to be a Metalink (`--follow-metalink`, on by default, as aria2's):
/// the Metalink is kept, and the files it describes are downloaded too — checked by their
/// hashes, by what `haul get` says and exits with, and by the headers each server saw.
@Suite("Following a Metalink", .tags(.process), .timeLimit(.minutes(10)))
struct FollowMetalinkTests {
    static func document(_ files: [(name: String, urls: [URL], hash: String)]) -> String {
        let entries = files.map { file in
            """
              <file name="\(file.name)">
                <hash type="sha-256">\(file.hash)</hash>
            \(file.urls.enumerated().map { "    <url priority=\"\($0.offset + 1)\">\($0.element.absoluteString)</url>" }.joined(separator: "\n"))
              </file>
            """
        }
        return """
            <?xml version="1.0" encoding="UTF-8"?>
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
            \(entries.joined(separator: "\n"))
            </metalink>
            """
    }

    @Test("a manager follows a URL served as application/metalink4+xml: its files are added, and the Metalink kept")
    func managerFollows() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                a.set("/one.bin", .init(size: 3 << 20, seed: 3))
                b.set("/one.bin", .init(size: 3 << 20, seed: 3, etag: .fixed("\"b\"")))
                b.set("/two.bin", .init(size: 100_000, seed: 4))
                let text = Self.document([
                    ("one.bin", [a.url("/one.bin"), b.url("/one.bin")], a.sha256("/one.bin")),
                    ("sub/two.bin", [b.url("/two.bin")], b.sha256("/two.bin")),
                ])
                a.set("/list", .document(text, contentType: "application/metalink4+xml; charset=utf-8"))
                var configuration = DownloadManager.Configuration(
                    downloader: testConfiguration(store: temp.file("s.sqlite"))
                )
                configuration.recoversTasks = false
                try await DownloadManager.withDownloadManager(configuration: configuration) { manager in
                    let events = manager.events()
                    let info = try await manager.download(
                        DownloadRequest(url: a.url("/list"), destination: .directory(temp.path))
                    )
                    var followed: [UUID] = []
                    for await event in events {
                        if case .completed(let id, let result) = event, id == info.id {
                            #expect(result.isMetalink)
                            #expect(result.followFailure == nil)
                            followed = result.followed
                            break
                        }
                    }
                    #expect(followed.count == 2)
                    #expect(
                        try await waitUntil(timeout: .seconds(60)) {
                            try await manager.tasks().allSatisfy { $0.state == .completed }
                        }
                    )
                    let tasks = try await manager.tasks()
                    #expect(Set(tasks.map(\.id)) == Set([info.id] + followed))
                    // The first file's second URL is its mirror.
                    let first = try await manager.info(followed[0])
                    #expect(first.sources.map(\.url) == [a.url("/one.bin"), b.url("/one.bin")])
                }
                #expect(try String(contentsOfFile: temp.file("list"), encoding: .utf8) == text, "the Metalink is kept")
                #expect(TestContent.sha256(file: temp.file("one.bin")) == a.sha256("/one.bin"))
                #expect(TestContent.sha256(file: temp.file("sub/two.bin")) == b.sha256("/two.bin"))
            }
        }
    }

    @Test("haul get: the Metalink's files are fetched and counted; --no-follow-metalink keeps the file alone")
    func getFollows() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                b.set("/data.bin", .init(size: 500_000, seed: 8))
                let text = Self.document([("data.bin", [b.url("/data.bin")], b.sha256("/data.bin"))])
                // By its name, whatever its type.
                a.set("/files.meta4", .document(text, contentType: "application/octet-stream"))

                let got = try await HaulProcess.get(
                    [
                        "-d", temp.file("out"), "-H", "Authorization: Bearer secret",
                        a.url("/files.meta4").absoluteString,
                    ],
                    in: temp
                )
                #expect(got.status == 0, "\(got.stderr)")
                #expect(got.stderr.contains("Done: 2 ok, 0 failed"), "\(got.stderr)")
                #expect(TestContent.sha256(file: temp.file("out/data.bin")) == b.sha256("/data.bin"))
                #expect(FileManager.default.fileExists(atPath: temp.file("out/files.meta4")))
                // The token went to the Metalink's server, not to the other host it names.
                #expect(a.requests(for: "/files.meta4").first?.header("Authorization") == "Bearer secret")
                let files = b.requests(for: "/data.bin")
                #expect(!files.isEmpty && files.allSatisfy { $0.header("Authorization") == nil })

                let kept = try await HaulProcess.get(
                    ["-d", temp.file("kept"), "--no-follow-metalink", a.url("/files.meta4").absoluteString],
                    in: temp
                )
                #expect(kept.status == 0, "\(kept.stderr)")
                #expect(FileManager.default.fileExists(atPath: temp.file("kept/files.meta4")))
                #expect(!FileManager.default.fileExists(atPath: temp.file("kept/data.bin")))
                #expect(b.requests(for: "/data.bin").count == files.count, "nothing more fetched")
            }
        }
    }

    @Test("a Metalink that cannot be followed: kept, one sentence saying why, exit 2")
    func cannotFollow() async throws {
        try await TestServer.withServer { a in
            let temp = try TemporaryDirectory()
            a.set(
                "/evil",
                .document(
                    #"<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="../x"><url>http://127.0.0.1:1/x</url></file></metalink>"#,
                    contentType: "application/metalink4+xml"
                )
            )
            let got = try await HaulProcess.get(["-d", temp.file("out"), a.url("/evil").absoluteString], in: temp)
            #expect(got.status == 2, "\(got.stderr)")
            #expect(got.stderr.contains("cannot be followed"), "\(got.stderr)")
            #expect(got.stderr.contains("has a name Haul will not write"), "\(got.stderr)")
            #expect(FileManager.default.fileExists(atPath: temp.file("out/evil")))
            #expect(!FileManager.default.fileExists(atPath: temp.file("x")))
        }
    }
}
