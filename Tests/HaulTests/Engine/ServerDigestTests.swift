import Foundation
import HaulTestSupport
import HaulTesting
import NIOHTTP1
import Testing

@testable import Haul

/// Digests of the whole file a server sends (RFC 9530, RFC 3230, RFC 1864), checked like a
/// `--checksum` when none is given: a mirror's wrong bytes cannot pass them.
@Suite("Server digests", .tags(.process), .timeLimit(.minutes(10)))
struct ServerDigestTests {
    static func base64(_ hex: String) -> String {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return Data(bytes).base64EncodedString()
    }

    @Test("which headers describe the whole file, and the strongest wins; a value that cannot be read is ignored")
    func parsing() throws {
        let sha256 = String(repeating: "ab", count: 32)
        let sha512 = String(repeating: "cd", count: 64)
        let md5 = String(repeating: "ef", count: 16)
        func digest(_ fields: [(String, String)], status: Int = 206) -> ServerDigest? {
            ServerDigest(headers: HTTPHeaders(fields), status: status)
        }
        let repr = try #require(digest([("Repr-Digest", "sha-256=:\(Self.base64(sha256)):")]))
        #expect(repr.header == "Repr-Digest" && repr.checksum.hex == sha256 && repr.checksum.algorithm == .sha256)
        let both = digest([("Repr-Digest", "sha-256=:\(Self.base64(sha256)):, sha-512=:\(Self.base64(sha512)):")])
        #expect(both?.checksum.algorithm == .sha512)
        #expect(digest([("Digest", "MD5=\(Self.base64(md5)), SHA-256=\(Self.base64(sha256))")])?.checksum.hex == sha256)
        // The content's digests describe a 206's part only.
        #expect(digest([("Content-MD5", Self.base64(md5))]) == nil)
        #expect(digest([("Content-MD5", Self.base64(md5))], status: 200)?.header == "Content-MD5")
        #expect(digest([("Content-Digest", "sha-256=:\(Self.base64(sha256)):")]) == nil)
        #expect(
            digest([("Content-Digest", "sha-256=:\(Self.base64(sha256)):"), ("Content-Encoding", "gzip")], status: 200)
                == nil
        )
        for bad in [
            "sha-256=:not base64:", "sha-256=\(Self.base64(sha256))", "sha-256=:\(Self.base64(md5)):",
            "md5=:\(Self.base64(md5)):", "unknown=:AAAA:",
        ] {
            #expect(digest([("Repr-Digest", bad)]) == nil, "\(bad)")
        }
    }

    @Test("the issue's repro: a mirror with two bytes flipped past its first 64 KiB is caught by the URL's Repr-Digest")
    func mirrorCaughtByDigest() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                let size = MirrorTests.size
                // The URL's bytes stop at 1 MiB until the mirror has served a segment: however
                // loaded the machine, the URL cannot finish the file alone before the mirror
                // is verified and writes some of it.
                var good = TestServer.Resource(size: size, seed: 12, holdAt: 1 << 20)
                a.set("/f.bin", good)
                good.headers = [("Repr-Digest", "sha-256=:\(Self.base64(a.sha256("/f.bin"))):")]
                a.set("/f.bin", good)
                // The same length and validators, two bytes wrong in each MiB past the first 64 KiB.
                var bad = TestServer.Resource(size: size, seed: 12, bytesPerSecond: 4 << 20)
                bad.corrupted = stride(from: 100_000, to: size, by: 1 << 20).map { $0..<($0 + 2) }
                b.set("/f.bin", bad)
                let run = Task {
                    try await HaulProcess.get(
                        [
                            "-x", "6", "--min-split", "256K", "--mirror", b.url("/f.bin").absoluteString,
                            a.url("/f.bin").absoluteString,
                        ],
                        in: temp
                    )
                }
                // Its verification sample, then a segment.
                #expect(try await waitUntil { b.requests(for: "/f.bin").count >= 2 })
                a.release("/f.bin")
                let (status, _, stderr) = try await run.value
                // Caught by the digest at the end, or — when the window the mirror is first
                // compared in holds one of its wrong bytes — by that comparison: never placed.
                #expect(status != 0, "\(stderr)")
                #expect(
                    stderr.contains("does not match the digest its server sent (Repr-Digest sha256")
                        || stderr.contains("The sources disagree about bytes"),
                    "\(stderr)"
                )
                #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin")), "a wrong file was placed")

                // From the URL alone, the same digest holds and the line says so.
                let alone = try TemporaryDirectory()
                let (fine, _, said) = try await HaulProcess.get(["-x", "4", a.url("/f.bin").absoluteString], in: alone)
                #expect(fine == 0, "\(said)")
                #expect(TestContent.sha256(file: alone.file("f.bin")) == a.sha256("/f.bin"))
                #expect(said.contains("; verified against the server's Repr-Digest"), "\(said)")
            }
        }
    }

    @Test("a file that does not match its server's digest is not placed, whatever served it")
    func wrongDigestRefused() async throws {
        try await TestServer.withServer { server in
            let temp = try TemporaryDirectory()
            var resource = TestServer.Resource(size: 300_000, seed: 14)
            // The digest of other bytes: as a server whose file changed under its digest.
            let other = TestContent.sha256([UInt8](repeating: 7, count: 10))
            resource.headers = [("Digest", "SHA-256=\(Self.base64(other))")]
            server.set("/f.bin", resource)
            let (status, _, stderr) = try await HaulProcess.get([server.url("/f.bin").absoluteString], in: temp)
            #expect(status == 7, "\(stderr)")
            #expect(stderr.contains("does not match the digest its server sent (Digest sha256"), "\(stderr)")
            #expect(!FileManager.default.fileExists(atPath: temp.file("f.bin")))
        }
    }

    @Test(
        "without any hash, a stretch a mirror wrote that differs from the URL's drops it; the file starts over, right"
    )
    func stretchCrossChecked() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                let size = 8 << 20
                a.set("/f.bin", .init(size: size, seed: 15, bytesPerSecond: 4 << 20))
                // Right where the mirror is first compared (the URL's first half, which the URL's
                // own two connections write), wrong every 32 KiB in the half it is given.
                var bad = TestServer.Resource(size: size, seed: 15, bytesPerSecond: 4 << 20)
                bad.corrupted = stride(from: 4 << 20, to: size, by: 32 << 10).map { $0..<($0 + 2) }
                b.set("/f.bin", bad)
                let (status, _, stderr) = try await HaulProcess.get(
                    [
                        "-x", "4", "--max-connections-per-server", "2", "--min-split", "256K",
                        "--mirror", b.url("/f.bin").absoluteString, a.url("/f.bin").absoluteString,
                    ],
                    in: temp
                )
                #expect(status == 0, "\(stderr)")
                #expect(TestContent.sha256(file: temp.file("f.bin")) == a.sha256("/f.bin"))
                #expect(stderr.contains("haul: dropped \(b.url("/f.bin").absoluteString): its bytes "), "\(stderr)")
                #expect(stderr.contains("differ from the URL's"), "\(stderr)")
                // After the drop, the file was fetched again from byte 0, from the URL.
                #expect(
                    a.requests(for: "/f.bin").filter { ($0.header("Range") ?? "bytes=0-").hasPrefix("bytes=0-") }.count
                        >= 2
                )
            }
        }
    }

    @Test("without a checksum or a digest, a mirror download says what it proves, on the line and in --json")
    func sampledIsSaid() async throws {
        try await TestServer.withServer { a in
            try await TestServer.withServer { b in
                let temp = try TemporaryDirectory()
                a.set("/f.bin", .init(size: 2 << 20, seed: 13))
                b.set("/f.bin", .init(size: 2 << 20, seed: 13))
                let arguments = [
                    "--min-split", "256K", "--mirror", b.url("/f.bin").absoluteString, a.url("/f.bin").absoluteString,
                ]
                let (status, _, stderr) = try await HaulProcess.get(arguments, in: temp)
                #expect(status == 0, "\(stderr)")
                #expect(
                    stderr.contains(
                        "no checksum or server digest: the mirrors' bytes were compared with the URL's in a 64 KiB window of each stretch they served"
                    ),
                    "\(stderr)"
                )
                let again = try TemporaryDirectory()
                let (json, stdout, _) = try await HaulProcess.get(["--json"] + arguments, in: again)
                #expect(json == 0)
                #expect(stdout.contains(#""verifiedAgainst":"sampled""#), "\(stdout)")
            }
        }
    }
}
