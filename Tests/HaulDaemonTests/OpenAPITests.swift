import Foundation
import HTTPTypes
import HaulTestSupport
import HaulWire
import HaulWireMapping
import Hummingbird
import HummingbirdTesting
import NIOCore
import OpenAPIKit
import Testing

@testable import Haul
@testable import HaulDaemon

/// The OpenAPI 3.1 document of `/v1` (Sources/HaulDaemon/Assets/openapi.json): valid as
/// OpenAPIKit reads it, describing exactly the routes the daemon registers, served at
/// `/v1/openapi.json` — and, in SchemathesisTests, what the daemon answers.
@Suite("OpenAPI document", .timeLimit(.minutes(10)))
struct OpenAPITests {
    static func document() throws -> OpenAPI.Document {
        let file = try #require(EmbeddedAssets.file("openapi.json"), "the document is not embedded")
        return try JSONDecoder().decode(OpenAPI.Document.self, from: Data(buffer: file.body))
    }

    @Test("valid OpenAPI 3.1: every reference resolves, every operation has an id and a 200")
    func valid() throws {
        let document = try Self.document()
        #expect(document.openAPIVersion.rawValue.hasPrefix("3.1"))
        _ = try document.validate()
        let dereferenced = try document.locallyDereferenced()
        for route in dereferenced.routes {
            for endpoint in route.pathItem.endpoints {
                let name = "\(endpoint.method.rawValue) \(route.path.rawValue)"
                #expect(endpoint.operation.operationId != nil, "\(name) has no operationId")
                #expect(endpoint.operation.responses[status: 200] != nil, "\(name) describes no 200")
                #expect(endpoint.operation.responses[status: 401] != nil, "\(name) does not say it needs the token")
            }
        }
    }

    @Test("every route the daemon has is described, and every described route exists")
    func describesEveryRoute() async throws {
        let described = Set(
            try Self.document().routes.flatMap { route in
                route.pathItem.endpoints.map { "\($0.method.rawValue) \(route.path.rawValue)" }
            }
        )
        try await RouteTests.withAPI { _, core in
            let registered = Set(
                Routes.v1Routes(core: core).endpoints.map { endpoint in
                    let path = endpoint.segments.map { $0.hasPrefix(":") ? "{\($0.dropFirst())}" : String($0) }
                    return "\(endpoint.method.rawValue) /\(path.joined(separator: "/"))"
                }
            )
            #expect(registered.count >= 19)
            #expect(registered.subtracting(described).isEmpty, "not described: \(registered.subtracting(described))")
            #expect(
                described.subtracting(registered).isEmpty,
                "described but absent: \(described.subtracting(registered))"
            )
        }
    }

    @Test("GET /v1/openapi.json serves the document, and only with the token on TCP")
    func served() async throws {
        let expected = try #require(EmbeddedAssets.file("openapi.json")).body
        try await RouteTests.withAPI(token: "t0ken") { client, _ in
            try await client.execute(uri: "/v1/openapi.json", method: .get) { response in
                #expect(response.status == .unauthorized)
            }
            try await client.execute(
                uri: "/v1/openapi.json",
                method: .get,
                headers: [.authorization: "Bearer t0ken"]
            ) { response in
                #expect(response.status == .ok)
                #expect(response.headers[.contentType] == "application/json")
                #expect(response.body == expected)
            }
        }
    }

    @Test("a null field the body type has is left out; a null field it lacks is refused by name")
    func nullFields() async throws {
        try await RouteTests.withAPI { client, _ in
            try await client.execute(
                uri: "/v1/tasks/pause",
                method: .post,
                body: ByteBuffer(string: #"{"all": true, "deleteFiles": null, "ids": null}"#)
            ) { response in
                #expect(response.status == .ok)
            }
            try await client.execute(
                uri: "/v1/settings",
                method: .put,
                body: ByteBuffer(string: #"{"maxConcurrentDownloads": 2, "limit": null}"#)
            ) { response in
                #expect(response.status == .badRequest)
                let failure = try JSONDecoder().decode(API.Failure.self, from: Data(buffer: response.body))
                #expect(failure.error == "Invalid request body: field 'limit' is not one the API knows")
            }
            try await client.execute(
                uri: "/v1/tasks",
                method: .post,
                body: ByteBuffer(
                    string:
                        #"{"downloads": [{"url": "http://127.0.0.1:9/a", "directory": "/tmp", "tls": {"verify": null}}]}"#
                )
            ) { response in
                let failure = try JSONDecoder().decode(API.Failure.self, from: Data(buffer: response.body))
                #expect(
                    failure.error == "Invalid request body: field 'downloads[0].tls.verify' is not one the API knows"
                )
            }
            // A null the type has, in the second of two downloads: reflected there alone, and accepted.
            try await client.execute(
                uri: "/v1/tasks",
                method: .post,
                body: ByteBuffer(
                    string: #"""
                        {"downloads": [{"url": "http://127.0.0.1:9/a", "directory": "/tmp", "session": "s"},
                            {"url": "http://127.0.0.1:9/b", "directory": "/tmp", "checksum": null, "session": "s"}]}
                        """#
                )
            ) { response in
                #expect(response.status == .ok, "\(String(buffer: response.body))")
            }
        }
    }

    @Test(
        "a body of many downloads alike is checked by one of each shape: a field unknown in one of forty is named at its place"
    )
    func unknownFieldAmongMany() async throws {
        @Sendable func body(_ odd: [Int: String]) -> ByteBuffer {
            let downloads = (0..<40).map { index in
                odd[index] ?? #"{"url": "http://127.0.0.1:9/f\#(index)", "directory": "/tmp", "session": "s"}"#
            }
            return ByteBuffer(string: #"{"downloads": ["# + downloads.joined(separator: ",") + "]}")
        }
        try await RouteTests.withAPI { client, _ in
            let cases: [([Int: String], String)] = [
                (
                    [33: #"{"url": "http://127.0.0.1:9/x", "directory": "/tmp", "colour": "red"}"#],
                    "downloads[33].colour"
                ),
                (
                    [
                        21: #"{"url": "http://127.0.0.1:9/y", "directory": "/tmp", "checksum": null}"#,
                        37: #"{"url": "http://127.0.0.1:9/z", "directory": "/tmp", "tls": {"verify": null}}"#,
                    ], "downloads[37].tls.verify"
                ),
                // A key written in the shapes' own notation.
                (
                    [30: #"{"url": "http://127.0.0.1:9/w", "directory": "/tmp", "session": "s", "7:session1:v": 1}"#],
                    "downloads[30].7:session1:v"
                ),
            ]
            for (odd, field) in cases {
                try await client.execute(uri: "/v1/tasks", method: .post, body: body(odd)) { response in
                    #expect(response.status == .badRequest)
                    let failure = try JSONDecoder().decode(API.Failure.self, from: Data(buffer: response.body))
                    #expect(failure.error == "Invalid request body: field '\(field)' is not one the API knows")
                }
            }
            try await client.execute(uri: "/v1/tasks", method: .post, body: body([:])) { response in
                #expect(response.status == .ok, "\(String(buffer: response.body))")
            }
        }
    }

    @Test("a path of a POST endpoint asked with GET is 405 allowing POST only, not a task id")
    func allowIsTheLiteralRoute() async throws {
        try await RouteTests.withAPI { client, _ in
            try await client.execute(uri: "/v1/tasks/pause", method: .get) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.allow] == "POST")
            }
            try await client.execute(uri: "/v1/tasks/\(UUID())", method: .post) { response in
                #expect(response.status == .methodNotAllowed)
                #expect(response.headers[.allow] == "GET")
            }
        }
    }
}
