import Foundation
import HTTPTypes
import Haul
import Hummingbird
import NIOCore
import NIOFoundationCompat

/// `/jsonrpc` as aria2 serves it: JSON-RPC 2.0 in the body of a POST, or in a GET's query
/// (`method`, `id`, and `params` as Base64 of the JSON array — or of a whole batch — with
/// `jsoncallback` for JSONP). Every answer is 200 with the JSON-RPC response, as aria2's.
struct Aria2Routes {
    let rpc: Aria2RPC

    func register(on router: Router<APIContext>) {
        router.post("/jsonrpc") { request, _ in
            var request = request
            let body: ByteBuffer
            do {
                body = try await request.collectBody(upTo: APIFailure.maxBodySize)
            } catch is NIOTooManyBytesError {
                return cors(
                    Self.json(
                        Aria2RPC.answer(Aria2RPC.response(id: .null, failure: .failed("The request is too large")))
                    )
                )
            }
            return cors(Self.json(await rpc.respond(to: Data(buffer: body))))
        }
        router.get("/jsonrpc") { request, _ in
            let query = request.uri.queryParameters
            let answer = await rpc.respond(
                toQuery: query.get("method").map { String($0) },
                id: query.get("id").map { String($0) },
                params: query.get("params").map { String($0) }
            )
            guard let callback = query.get("jsoncallback").map({ String($0) }) else { return cors(Self.json(answer)) }
            // JSONP: the response as the argument of the page's function, named safely.
            guard Self.isCallbackName(callback) else {
                return cors(Self.json(Aria2RPC.answer(Aria2RPC.response(id: .null, failure: .invalidRequest))))
            }
            var buffer = ByteBuffer(string: callback + "(")
            buffer.writeBytes(answer.body)
            buffer.writeString(")")
            return cors(
                Response(status: .ok, headers: [.contentType: "text/javascript"], body: .init(byteBuffer: buffer))
            )
        }
        // A browser's preflight before a cross-origin POST: allowed only with --rpc-allow-origin-all.
        router.on("/jsonrpc", method: .options) { request, _ in
            guard rpc.allowsAllOrigins else { return Response(status: .forbidden) }
            var response = cors(Response(status: .ok))
            response.headers[.accessControlAllowMethods] = "POST, GET, OPTIONS"
            response.headers[.accessControlAllowHeaders] =
                request.headers[.accessControlRequestHeaders].map { String($0.prefix(200)) } ?? "Content-Type"
            response.headers[.accessControlMaxAge] = "1728000"
            return response
        }
    }

    /// `response` with `Access-Control-Allow-Origin: *` when all origins are allowed.
    private func cors(_ response: Response) -> Response {
        guard rpc.allowsAllOrigins else { return response }
        var response = response
        response.headers[.accessControlAllowOrigin] = "*"
        return response
    }

    static func json(_ answer: Aria2RPC.Answer) -> Response {
        Response(
            status: .init(code: answer.status),
            headers: [.contentType: "application/json-rpc"],
            body: .init(byteBuffer: ByteBuffer(data: answer.body))
        )
    }

    /// A JavaScript identifier (with dots), at most 100 characters: nothing else is echoed.
    static func isCallbackName(_ name: String) -> Bool {
        !name.isEmpty && name.utf8.count <= 100
            && name.utf8.allSatisfy { byte in
                (65...90).contains(byte) || (97...122).contains(byte) || (48...57).contains(byte) || byte == 95
                    || byte == 36 || byte == 46
            }
    }
}

extension Aria2RPC {
    /// The answer to a GET: `params` is Base64 of the JSON array of parameters, or, without
    /// `method`, of a whole request or batch (aria2's encoding, after JSON-RPC over HTTP).
    func respond(toQuery method: String?, id: String?, params: String?) async -> Answer {
        var decoded: JSONValue?
        if let params {
            // Base64 as given (percent-decoding already undid %3D), with or without padding.
            var text = params.replacingOccurrences(of: " ", with: "+")
            while text.utf8.count % 4 != 0 { text += "=" }
            guard let data = Data(base64Encoded: text),
                let value = try? JSONDecoder().decode(JSONValue.self, from: data)
            else { return Self.answer(Self.response(id: id.map { .string($0) } ?? .null, failure: .parseError)) }
            decoded = value
        }
        guard let method else {
            guard let decoded else { return Self.answer(Self.response(id: .null, failure: .invalidRequest)) }
            return Self.answer(await respond(to: decoded))
        }
        var request: [String: JSONValue] = ["jsonrpc": "2.0", "method": .string(method)]
        request["id"] = id.map { .string($0) } ?? .null
        if let decoded { request["params"] = decoded }
        return Self.answer(await respond(to: .object(request)))
    }
}
