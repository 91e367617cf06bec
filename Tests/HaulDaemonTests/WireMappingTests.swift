import Foundation
import Haul
import HaulTestSupport
import HaulWire
import HaulWireMapping
import Testing

/// The wire's types (HaulWire, Foundation only) against the library's: same names for every
/// state and reason, a request that comes back from its body as it was sent, and the same
/// JSON as the library's own Codable types wrote, so bodies stored or sent by an older
/// client read the same.
@Suite("The wire's types and the library's", .timeLimit(.minutes(1)))
struct WireMappingTests {
    @Test("every state and every reason has the same name on the wire and in the library, both ways")
    func namesMatch() {
        #expect(TaskState.allCases.map(\.rawValue).sorted() == API.TaskState.allCases.map(\.rawValue).sorted())
        #expect(
            StateChangeReason.allCases.map(\.rawValue).sorted()
                == API.StateChangeReason.allCases.map(\.rawValue).sorted()
        )
        for state in TaskState.allCases { #expect(TaskState(API.TaskState(state)) == state) }
        for reason in StateChangeReason.allCases { #expect(API.StateChangeReason(reason).rawValue == reason.rawValue) }
    }

    /// A request with every field away from its default.
    static func fullRequest() throws -> DownloadRequest {
        var destination = Destination.directory("/data")
        destination.fileName = "a.iso"
        var request = DownloadRequest(
            url: URL(string: "http://example.test/a.iso")!,
            destination: destination,
            headers: [HTTPHeaderField(name: "X-Token", value: "t")],
            checksum: try Checksum(parsing: "sha256=" + String(repeating: "ab", count: 32)),
            overwrite: true,
            session: "nightly",
            connections: 3,
            minSplitSize: 1 << 20,
            rateLimit: 4096,
            tls: TLSOptions(
                certificateAuthorities: "/ca.pem",
                verifiesCertificates: false,
                clientCertificate: "/c.pem"
            ),
            proxy: ProxySettings(http: "http://proxy.test:3128", noProxy: ["local.test"]),
            credentials: Credentials(user: "u", password: "p"),
            cookies: CookieOptions(enabled: false)
        )
        request.allowsMeteredNetwork = false
        request.checkNewer = true
        request.continuesExistingFile = true
        request.hooks = Hooks(onComplete: "/bin/true", onError: "/bin/false")
        request.mirrors = [URL(string: "http://mirror.test/a.iso")!]
        request.maxConnectionsPerServer = 2
        request.pieceHashes = try PieceHashes(
            algorithm: .sha256,
            length: 1 << 18,
            hexDigests: [String(repeating: "cd", count: 32)]
        )
        request.followsMetalink = false
        return request
    }

    @Test("a request written by the client is read back by the daemon as it was, every field")
    func requestRoundTrip() throws {
        let request = try Self.fullRequest()
        let body = try API.JSON.encoder().encode(API.AddRequest.Download(request))
        let back = try API.JSON.decoder.decode(API.AddRequest.Download.self, from: body).request()
        #expect(back.url == request.url && back.destination.fileName == "a.iso")
        #expect(back.headers == request.headers && back.checksum == request.checksum)
        #expect(back.tls == request.tls && back.proxy == request.proxy)
        #expect(back.credentials == request.credentials && back.cookies == request.cookies)
        #expect(back.hooks == request.hooks && back.mirrors == request.mirrors)
        #expect(back.pieceHashes == request.pieceHashes && !back.followsMetalink && !back.allowsMeteredNetwork)
        #expect(back.checkNewer && back.continuesExistingFile && back.overwrite)
        #expect(back.connections == 3 && back.minSplitSize == 1 << 20 && back.rateLimit == 4096)
        #expect(back.maxConnectionsPerServer == 2 && back.session == "nightly")
        // And the body of what came back is the body sent.
        #expect(try API.JSON.encoder().encode(API.AddRequest.Download(back)) == body)
    }

    @Test("the wire's options are written as the library's Codable types wrote them")
    func sameJSON() throws {
        let request = try Self.fullRequest()
        let encoder = API.JSON.encoder()
        #expect(try encoder.encode(API.TLS(request.tls)) == encoder.encode(request.tls))
        #expect(try encoder.encode(API.Proxy(request.proxy)) == encoder.encode(request.proxy))
        #expect(try encoder.encode(API.Credentials(request.credentials)) == encoder.encode(request.credentials))
        #expect(try encoder.encode(API.Cookies(request.cookies)) == encoder.encode(request.cookies))
        // What a body leaves out reads as the library's defaults.
        let sparse = try API.JSON.decoder.decode(
            API.AddRequest.Download.self,
            from: Data(#"{"url":"http://example.test/f","directory":"/d","tls":{},"cookies":{}}"#.utf8)
        )
        let read = try sparse.request()
        #expect(read.tls == TLSOptions() && read.cookies == .standard && read.proxy == .direct)
    }

    @Test("a body the daemon cannot take says why: relative directory, bad piece algorithm, too many mirrors")
    func refusals() throws {
        var download = API.AddRequest.Download(url: "http://example.test/f", directory: "data")
        #expect(throws: HaulError.self) { try download.request() }
        download.directory = "/data"
        download.pieceHashes = .init(algorithm: "crc32", length: 1024, hashes: ["00"])
        let error = #expect(throws: HaulError.self) { try download.request() }
        #expect(error?.message.contains("Unknown piece hash algorithm 'crc32'") == true)
        download.pieceHashes = nil
        download.mirrors = Array(repeating: "http://mirror.test/f", count: DownloadSource.maxSources)
        #expect(throws: HaulError.self) { try download.request() }
    }

    @Test("a task is answered as the library's type wrote it, credentials redacted, and read back field by field")
    func taskRoundTrip() throws {
        var info = DownloadInfo(
            id: UUID(),
            url: URL(string: "http://user:secret@example.test/a.iso")!,
            path: "/data/a.iso",
            directory: "/data",
            state: .retrying,
            priority: 3,
            bytesCommitted: 1_000,
            totalBytes: 4_000,
            errorMessage: "HTTP 503 from http://user:secret@example.test/a.iso",
            session: "nightly",
            rateLimit: 512,
            connections: 2,
            nextTryAt: Date(timeIntervalSince1970: 1_800_000_000),
            errorCode: .httpStatus
        )
        info.node = "n1"
        info.sources = [DownloadSource(url: URL(string: "http://mirror.test/a.iso")!, verified: true, bytes: 10)]
        let encoder = API.JSON.encoder()
        let body = try encoder.encode(API.Task(info))
        #expect(body == (try encoder.encode(info)))
        #expect(!String(decoding: body, as: UTF8.self).contains("secret"))
        let back = try DownloadInfo(try API.JSON.decoder.decode(API.Task.self, from: body))
        #expect(back.state == .retrying && back.errorCode == .httpStatus && back.node == "n1")
        #expect(back.sources.map(\.url) == info.sources.map(\.url) && back.nextTryAt == info.nextTryAt)
        #expect(back.url.absoluteString == "http://user:***@example.test/a.iso")
        #expect(back.errorMessage == "HTTP 503 from http://user:***@example.test/a.iso")
        var bad = API.Task(info)
        bad.url = "http://a b"
        #expect(throws: HaulError.self) { try DownloadInfo(bad) }
    }
}
