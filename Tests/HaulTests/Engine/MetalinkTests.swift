import Foundation
import HaulTestSupport
import HaulTesting
import Testing

@testable import Haul

/// Metalink 4 (RFC 5854) and 3 documents: what is read from them, and every hostile one
/// refused in one sentence.
@Suite("Metalink", .timeLimit(.minutes(10)))
struct MetalinkTests {
    static let hash = String(repeating: "ab", count: 32)

    @Test("Metalink 4: names, sizes, the strongest hash first, pieces, URLs by priority")
    func metalink4() throws {
        let document = Fixtures.metalink4(
            """
              <file name="a.iso">
                <size>600000</size>
                <hash type="sha-1">\(String(repeating: "1", count: 40))</hash>
                <hash type="sha-256">\(Self.hash)</hash>
                <hash type="tiger">ignored</hash>
                <pieces length="262144" type="sha-256">
                  <hash>\(String(repeating: "0", count: 64))</hash>
                  <hash>\(String(repeating: "1", count: 64))</hash>
                  <hash>\(String(repeating: "2", count: 64))</hash>
                </pieces>
                <url location="de" priority="2">http://mirror.example.net/a.iso</url>
                <url priority="1">https://example.org/a.iso</url>
                <url>ftp://example.org/a.iso</url>
                <metaurl mediatype="torrent">http://example.org/a.torrent</metaurl>
              </file>
              <file name="sub/b.bin">
                <url>http://example.org/b.bin</url>
              </file>
            """
        )
        let metalink = try Metalink(parsing: document, source: "t.meta4")
        #expect(metalink.files.count == 2)
        let a = metalink.files[0]
        #expect(a.name == "a.iso" && a.size == 600_000)
        #expect(a.hashes.map(\.algorithm) == [.sha256, .sha1])
        #expect(a.hashes.first?.hex == Self.hash)
        #expect(a.pieces?.length == 262_144 && a.pieces?.count == 3 && a.pieces?.algorithm == .sha256)
        #expect(
            a.urls.map(\.absoluteString) == ["https://example.org/a.iso", "http://mirror.example.net/a.iso"],
            "by priority; ftp is not a source"
        )
        #expect(metalink.files[1].name == "sub/b.bin" && metalink.files[1].size == nil)
    }

    @Test("Metalink 3: verification hashes, and URLs by preference (100 first)")
    func metalink3() throws {
        let document = Data(
            """
            <?xml version="1.0"?>
            <metalink version="3.0" xmlns="http://www.metalinker.org/">
              <files>
                <file name="c.tar.gz">
                  <size>1024</size>
                  <verification><hash type="sha256">\(Self.hash)</hash></verification>
                  <resources>
                    <url type="http" preference="10">http://slow.example.net/c.tar.gz</url>
                    <url type="http" location="us" preference="100">http://fast.example.net/c.tar.gz</url>
                  </resources>
                </file>
              </files>
            </metalink>
            """.utf8
        )
        let file = try #require(try Metalink(parsing: document, source: "t.metalink").files.first)
        #expect(file.name == "c.tar.gz" && file.size == 1024 && file.hashes.first?.hex == Self.hash)
        #expect(file.urls.map(\.host) == ["fast.example.net", "slow.example.net"])
    }

    @Test(
        "a hostile Metalink is refused in one sentence naming what is wrong",
        arguments: [
            (#"<file name="../etc/passwd"><url>http://h/x</url></file>"#, "has a name Haul will not write"),
            (#"<file name="/abs"><url>http://h/x</url></file>"#, "has a name Haul will not write"),
            (#"<file name="a/./b"><url>http://h/x</url></file>"#, "has a name Haul will not write"),
            (#"<file name="big"><size>99999999999999999999</size><url>http://h/x</url></file>"#, "size that is not"),
            (#"<file name="neg"><size>-1</size><url>http://h/x</url></file>"#, "size that is not"),
            (
                #"<file name="none"><url>ftp://h/x</url><url>file:///etc/passwd</url></file>"#,
                "has no http or https URL"
            ),
            (#"<file name="h"><hash type="sha-256">xyz</hash><url>http://h/x</url></file>"#, "not 64 hex digits"),
            (
                #"<file name="p"><size>5000</size><pieces length="1024" type="sha-1"><hash>\#(String(repeating: "a", count: 40))</hash></pieces><url>http://h/x</url></file>"#,
                "its 1 piece hashes of 1024 bytes do not fit a file of 5000 bytes (5 pieces)"
            ),
            (#"<file><url>http://h/x</url></file>"#, "a <file> has no name"),
            (#"<file name="d"><url>http://h/x</url></file><file name="d"><url>http://h/y</url></file>"#, "twice"),
            ("", "describes no file"),
        ]
    )
    func hostile(files: String, complaint: String) {
        #expect {
            _ = try Metalink(parsing: Fixtures.metalink4(files), source: "bad.meta4")
        } throws: { error in
            let text = "\(error)"
            return text.contains("bad.meta4") && text.contains(complaint)
        }
    }

    @Test(
        "not XML, another root, a document type with entities: refused in one sentence with the line, no entity read",
        arguments: [
            ("this is not xml", "(line 1): it is not well-formed XML"),
            (#"<html xmlns="http://www.w3.org/1999/xhtml"><body/></html>"#, "(line 1): its root is <html>"),
            (#"<metalink><file name="a"><url>http://h/x</url></file></metalink>"#, "not <metalink> of Metalink 4 or 3"),
            (
                """
                <?xml version="1.0"?>
                <!DOCTYPE metalink [<!ENTITY secret SYSTEM "file:///etc/hostname">]>
                <metalink xmlns="urn:ietf:params:xml:ns:metalink">
                  <file name="a"><size>&secret;</size><url>http://h/x</url></file>
                </metalink>
                """,
                "it declares a document type (<!DOCTYPE>)"
            ),
            (
                """
                <?xml version="1.0"?>
                <!DOCTYPE lolz [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">
                <!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;"><!ENTITY d "&c;&c;&c;&c;&c;&c;&c;&c;&c;&c;">]>
                <metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="&d;"><url>http://h/x</url></file></metalink>
                """,
                // An attribute's entities are replaced as it is read: libxml2 stops the growth
                // itself, before the document type reaches Haul.
                "(line 4): it is not well-formed XML"
            ),
            (
                #"<metalink xmlns="urn:ietf:params:xml:ns:metalink"><file name="a"><url>http://h/&undefined;</url></file></metalink>"#,
                "it is not well-formed XML"
            ),
            (
                "<metalink xmlns=\"urn:ietf:params:xml:ns:metalink\">\n<file name=\"a\">\n<url>http://h/x</url>\n</metalink>",
                "(line 4): it is not well-formed XML"
            ),
            ("", "(line 1): it is not well-formed XML"),
        ]
    )
    func notAMetalink(text: String, complaint: String) {
        let hostname = (try? String(contentsOfFile: "/etc/hostname", encoding: .utf8))?
            .trimmingCharacters(in: .whitespacesAndNewlines)
        #expect {
            _ = try Metalink(parsing: Data(text.utf8), source: "x.meta4")
        } throws: { error in
            let message = "\(error)"
            if let hostname, !hostname.isEmpty, message.contains(hostname) { return false }
            return message.hasPrefix("x.meta4 is not a Metalink") && message.contains(complaint)
        }
    }

    @Test("empty elements, CDATA, comments, character references and UTF-16 read as XML says")
    func xmlForms() throws {
        let document = """
            <?xml version="1.0" encoding="UTF-16"?>
            <!-- a mirror list -->
            <metalink xmlns="urn:ietf:params:xml:ns:metalink">
              <file name="caf&#xE9; &amp; t\u{E9}"><size>10</size><description/>
                <url priority="2"><![CDATA[http://h/b?x=1&y=2]]></url>
                <url priority="1">http://h/a<!-- inside -->.bin</url>
              </file>
              <file name="empty"><metaurl mediatype="torrent"/><url>http://h/e</url></file>
            </metalink>
            """
        var utf16 = Data([0xFF, 0xFE])
        for unit in document.utf16 { utf16.append(contentsOf: [UInt8(unit & 0xFF), UInt8(unit >> 8)]) }
        let metalink = try Metalink(parsing: utf16, source: "u.meta4")
        #expect(metalink.files.map(\.name) == ["caf\u{E9} & t\u{E9}", "empty"])
        #expect(metalink.files[0].size == 10)
        #expect(metalink.files[0].urls.map(\.absoluteString) == ["http://h/a.bin", "http://h/b?x=1&y=2"])
        #expect(metalink.files[1].urls.map(\.absoluteString) == ["http://h/e"])
    }
}

/// `haul get -M`, as a user runs it.
@Suite("haul get -M", .tags(.process), .timeLimit(.minutes(10)))
struct MetalinkCommandTests {
    @Test("haul get -M: each file from its URLs at once, named and checked as the Metalink says")
    func getMetalink() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                let size = 4 << 20
                // Each connection to the first URL is slow enough that the second is checked and
                // takes a segment before the first's connections could claim them all.
                a.set("/one.bin", .init(size: size, bytesPerSecond: 1 << 20))
                b.set("/one.bin", .init(size: size, etag: .fixed("\"b\""), bytesPerSecond: 4 << 20))
                a.set("/two.bin", .init(size: 100_000, seed: 9))
                let document = """
                    <?xml version="1.0" encoding="UTF-8"?>
                    <metalink xmlns="urn:ietf:params:xml:ns:metalink">
                      <file name="one.iso">
                        <size>\(size)</size>
                        <hash type="sha-256">\(a.sha256("/one.bin"))</hash>
                        <url priority="1">\(a.url("/one.bin").absoluteString)</url>
                        <url priority="2">\(b.url("/one.bin").absoluteString)</url>
                      </file>
                      <file name="sub/two.bin">
                        <hash type="sha-256">\(a.sha256("/two.bin"))</hash>
                        <url>\(a.url("/two.bin").absoluteString)</url>
                      </file>
                    </metalink>
                    """
                try document.write(toFile: temp.file("files.meta4"), atomically: true, encoding: .utf8)
                let out = temp.file("out")
                let (status, _, stderr) = try await HaulProcess.get(
                    ["-M", temp.file("files.meta4"), "-d", out, "-x", "4", "--min-split", "256K"],
                    in: temp
                )
                #expect(status == 0, "\(stderr)")
                #expect(TestContent.sha256(file: out + "/one.iso") == a.sha256("/one.bin"))
                #expect(TestContent.sha256(file: out + "/sub/two.bin") == a.sha256("/two.bin"))
                #expect(b.requests(for: "/one.bin").count > 1, "the second URL served segments")

                // A hash the bytes do not have: exit 7, nothing placed.
                let wrong = document.replacingOccurrences(
                    of: a.sha256("/two.bin"),
                    with: String(repeating: "0", count: 64)
                )
                try wrong.write(toFile: temp.file("wrong.meta4"), atomically: true, encoding: .utf8)
                let refused = try await HaulProcess.get(
                    ["-M", temp.file("wrong.meta4"), "-d", temp.file("out2")],
                    in: temp
                )
                #expect(refused.status == 7, "\(refused.stderr)")
                #expect(!FileManager.default.fileExists(atPath: temp.file("out2/sub/two.bin")))
            }
        }
    }

    @Test(
        "-M with piece hashes: a damaged mirror's piece is fetched again (haul get says so); the daemon checks pieces too"
    )
    func metalinkPieces() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                let size = PieceTests.size
                // The same file at two paths: one for haul get, one for the daemon. The good
                // mirror holds each response at 1 MiB until the damaged one has served its
                // part, so the damaged pieces are fetched however slow the machine is.
                for path in ["/f.bin", "/d.bin"] {
                    a.set(path, .init(size: size, holdAt: 1 << 20))
                    let damaged = (16..<32).map { $0 * Fixtures.pieceLength + 7..<$0 * Fixtures.pieceLength + 8 }
                    b.set(path, .init(size: size, etag: .fixed("\"b\""), corrupted: damaged))
                    let pieces = try Fixtures.pieceHashes(of: a.content(path))
                    let hashes = (0..<pieces.count).map { "<hash>\(pieces.hex($0))</hash>" }.joined(separator: "\n")
                    try """
                    <metalink xmlns="urn:ietf:params:xml:ns:metalink">
                      <file name="f.bin">
                        <size>\(size)</size>
                        <pieces length="\(Fixtures.pieceLength)" type="sha-256">\(hashes)</pieces>
                        <url priority="1">\(a.url(path).absoluteString)</url>
                        <url priority="2">\(b.url(path).absoluteString)</url>
                      </file>
                    </metalink>
                    """.write(toFile: temp.file("\(path.dropFirst()).meta4"), atomically: true, encoding: .utf8)
                }
                /// Lets the good mirror go on once the damaged one has answered and ended.
                func releaseOnceDamagedServed(_ path: String) async throws {
                    #expect(try await waitUntil { b.bodyBytesSent(path) > 0 && b.activeResponses == 0 })
                    a.release(path)
                }

                async let getting = HaulProcess.get(
                    [
                        "-M", temp.file("f.bin.meta4"), "-d", temp.file("get"), "-x", "2",
                        "--max-connections-per-server", "1",
                    ],
                    in: temp
                )
                try await releaseOnceDamagedServed("/f.bin")
                let got = try await getting
                #expect(got.status == 0, "\(got.stderr)")
                #expect(TestContent.sha256(file: temp.file("get/f.bin")) == a.sha256("/f.bin"))
                #expect(got.stderr.contains("fetched again; from 2 of 2 sources"), "\(got.stderr)")
                #expect(
                    got.stderr.contains(
                        "haul: dropped \(b.url("/f.bin").absoluteString): 2 of its pieces did not match their sha256 hashes"
                    ),
                    "\(got.stderr)"
                )

                // The daemon: the same pieces through the API, checked the same way.
                let home = temp.file("home")
                let started = try await HaulProcess.run(["daemon"], home: home)
                #expect(started.status == 0, "\(started.stderr)")
                let added = try await HaulProcess.run(
                    [
                        "add", "-M", temp.file("d.bin.meta4"), "-d", temp.file("add"), "-x", "2",
                        "--max-connections-per-server", "1",
                    ],
                    home: home
                )
                #expect(added.status == 0, "\(added.stderr)")
                try await releaseOnceDamagedServed("/d.bin")
                let waited = try await HaulProcess.run(["wait"], home: home)
                #expect(waited.status == 0, "\(waited.stderr)")
                #expect(TestContent.sha256(file: temp.file("add/f.bin")) == a.sha256("/d.bin"))
                let listed = try await HaulProcess.run(["list", "--json"], home: home)
                #expect(listed.stdout.contains("did not match their sha256 hashes"), "\(listed.stdout)")
                _ = try await HaulProcess.run(["daemon", "stop"], home: home)
            }
        }
    }

    @Test("a Metalink that names a file outside -d, or is missing, stops before anything is made")
    func refusedBeforeAnything() async throws {
        let temp = try TemporaryDirectory()
        try """
        <metalink xmlns="urn:ietf:params:xml:ns:metalink">
          <file name="../escape.bin"><url>http://127.0.0.1:1/x</url></file>
        </metalink>
        """.write(toFile: temp.file("evil.meta4"), atomically: true, encoding: .utf8)
        let evil = try await HaulProcess.get(["-M", temp.file("evil.meta4"), "-d", temp.file("made")], in: temp)
        #expect(evil.status == 2, "\(evil.stderr)")
        #expect(evil.stderr.contains("has a name Haul will not write"), "\(evil.stderr)")
        #expect(!FileManager.default.fileExists(atPath: temp.file("made")), "-d is not created")
        let missing = try await HaulProcess.get(["-M", temp.file("nope.meta4")], in: temp)
        #expect(missing.status == 3, "\(missing.stderr)")
        #expect(missing.stderr.contains("Cannot read the Metalink file"), "\(missing.stderr)")
    }
}
