import Foundation
import Haul

/// aria2's JSON-RPC interface over the daemon (`/jsonrpc`), so that aria2's clients — web
/// UIs, browser extensions, aria2p and the like — drive Haul as they drive aria2.
///
/// JSON-RPC 2.0 as aria2 speaks it (aria2c(1), "RPC INTERFACE"): a request or a batch of
/// them; the secret as the first parameter, `"token:SECRET"`; numbers in results as strings
/// of digits; errors as `{"code": 1, "message": …}` for a method that fails, JSON-RPC's own
/// codes for a request that is not one. The methods are in Aria2RPC+Methods.swift, the
/// shapes of a download in Aria2Status.swift.
struct Aria2RPC: Sendable {
    let core: DaemonCore
    /// What `"token:…"` must carry: the daemon's `--rpc-secret`, else its TCP token.
    let secret: String
    /// Where a download goes when its `dir` option names none.
    let defaultDirectory: String
    /// Whether answers carry `Access-Control-Allow-Origin: *`, so a web page of any origin can
    /// call (aria2's `--rpc-allow-origin-all`; the secret is still checked on every call).
    var allowsAllOrigins = false

    /// The most requests one batch (or `system.multicall`) may hold.
    static let maxBatch = 1_000

    /// An error answered to a call: aria2's code 1 with a sentence for a method that
    /// fails, JSON-RPC's negative codes for a request that cannot be one.
    struct Failure: Error, Equatable {
        var code: Int
        var message: String

        /// A method that fails, in a sentence with the secrets of any URL in it hidden.
        static func failed(_ message: String) -> Failure { Failure(code: 1, message: Redaction.text(message)) }
        static let unauthorized = Failure(code: 1, message: "Unauthorized")
        static let parseError = Failure(code: -32700, message: "Parse error.")
        static let invalidRequest = Failure(code: -32600, message: "Invalid Request.")

        var json: JSONValue { ["code": .int(Int64(code)), "message": .string(message)] }
    }

    // MARK: Requests

    /// An answer and its HTTP status as aria2 gives it: 200 for a result or a batch, 400 for
    /// a single request's error, 500 for a body that is not JSON.
    struct Answer: Sendable {
        var body: Data
        var status: Int
    }

    /// The answer to a request body: one response, a batch's array of them, or a parse error.
    func respond(to body: Data) async -> Answer {
        let request: JSONValue
        do {
            request = try JSONDecoder().decode(JSONValue.self, from: body)
        } catch {
            return Answer(body: Self.encode(Self.response(id: .null, failure: .parseError)), status: 500)
        }
        return Self.answer(await respond(to: request))
    }

    /// `response` encoded, with the status aria2 gives it.
    static func answer(_ response: JSONValue) -> Answer {
        let failed = response.object?["error"] != nil
        let parse = response.object?["error"]?.object?["code"] == .int(-32700)
        return Answer(body: encode(response), status: parse ? 500 : failed ? 400 : 200)
    }

    /// The answer to a decoded request or batch.
    func respond(to request: JSONValue) async -> JSONValue {
        guard case .array(let batch) = request else { return await respondToOne(request) }
        guard batch.count <= Self.maxBatch else {
            return Self.response(
                id: .null,
                failure: .failed("A batch of \(batch.count) requests is more than \(Self.maxBatch)")
            )
        }
        var responses: [JSONValue] = []
        responses.reserveCapacity(batch.count)
        for item in batch { responses.append(await respondToOne(item)) }
        return .array(responses)
    }

    private func respondToOne(_ request: JSONValue) async -> JSONValue {
        guard let fields = request.object else { return Self.response(id: .null, failure: .invalidRequest) }
        let id = fields["id"] ?? .null
        guard let method = fields["method"]?.string else { return Self.response(id: id, failure: .invalidRequest) }
        let params: [JSONValue]
        switch fields["params"] {
        case nil, .null?: params = []
        case .array(let values)?: params = values
        default: return Self.response(id: id, failure: .invalidRequest)
        }
        do {
            return ["id": id, "jsonrpc": "2.0", "result": try await call(method, params)]
        } catch let failure as Failure {
            return Self.response(id: id, failure: failure)
        } catch let error as HaulError {
            return Self.response(id: id, failure: .failed(error.message))
        } catch {
            return Self.response(id: id, failure: .failed("The request failed: \(type(of: error))"))
        }
    }

    static func response(id: JSONValue, failure: Failure) -> JSONValue {
        ["id": id, "jsonrpc": "2.0", "error": failure.json]
    }

    static func encode(_ value: JSONValue) -> Data {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return (try? encoder.encode(value))
            ?? Data(#"{"id":null,"jsonrpc":"2.0","error":{"code":1,"message":"?"}}"#.utf8)
    }

    // MARK: Calls

    /// Calls `method`: the secret checked and taken off first, except for the methods that
    /// only list what exists (as aria2 does), and `system.multicall`, whose calls carry it.
    func call(_ method: String, _ params: [JSONValue]) async throws -> JSONValue {
        switch method {
        case "system.listMethods":
            return .array(Self.methods.map { .string($0) })
        case "system.listNotifications":
            return .array(Self.notifications.map { .string($0) })
        case "system.multicall":
            return try await multicall(params)
        default:
            guard Self.methods.contains(method) else { throw Failure.failed("No such method: \(method)") }
            return try await callMethod(method, Parameters(try authorised(params)))
        }
    }

    /// `params` without the secret, which must be its first: `"token:SECRET"`.
    private func authorised(_ params: [JSONValue]) throws -> [JSONValue] {
        guard let first = params.first?.string, first.hasPrefix("token:"),
            Secret.matches(String(first.dropFirst("token:".count)), secret)
        else { throw Failure.unauthorized }
        return Array(params.dropFirst())
    }

    /// `system.multicall([{methodName, params}, …])`: each call's result in an array of
    /// one, or its error as `{code, message}`, in order.
    private func multicall(_ params: [JSONValue]) async throws -> JSONValue {
        guard let calls = params.first?.array else {
            throw Failure.failed("system.multicall takes an array of {methodName, params}")
        }
        guard calls.count <= Self.maxBatch else {
            throw Failure.failed("system.multicall of \(calls.count) calls is more than \(Self.maxBatch)")
        }
        var results: [JSONValue] = []
        for call in calls {
            guard let fields = call.object, let name = fields["methodName"]?.string else {
                results.append(Failure.failed("A call of system.multicall has no methodName").json)
                continue
            }
            guard name != "system.multicall" else {
                results.append(Failure.failed("system.multicall cannot call itself").json)
                continue
            }
            do {
                results.append([try await self.call(name, fields["params"]?.array ?? [])])
            } catch let failure as Failure {
                results.append(failure.json)
            } catch let error as HaulError {
                results.append(Failure.failed(error.message).json)
            }
        }
        return .array(results)
    }

    /// The notifications aria2 defines (sent over WebSocket).
    static let notifications = [
        "aria2.onDownloadStart", "aria2.onDownloadPause", "aria2.onDownloadStop", "aria2.onDownloadComplete",
        "aria2.onDownloadError", "aria2.onBtDownloadComplete",
    ]
}

/// A method's parameters (the secret already taken off), read by position as aria2 does.
struct Parameters {
    let values: [JSONValue]

    init(_ values: [JSONValue]) {
        self.values = values
    }

    /// The parameter at `index`, which must be there.
    func required(_ index: Int) throws -> JSONValue {
        guard index < values.count else {
            throw Aria2RPC.Failure.failed("The parameter at \(index) is required but missing.")
        }
        return values[index]
    }

    func optional(_ index: Int) -> JSONValue? {
        index < values.count ? values[index] : nil
    }

    func string(_ index: Int) throws -> String {
        guard let text = try required(index).string else {
            throw Aria2RPC.Failure.failed("The parameter at \(index) has wrong type.")
        }
        return text
    }

    func integer(_ index: Int) throws -> Int64 {
        guard let value = try required(index).integer else {
            throw Aria2RPC.Failure.failed("The parameter at \(index) has wrong type.")
        }
        return value
    }

    /// A list of keys (tellStatus's `keys`), when given.
    func keys(_ index: Int) throws -> Set<String>? {
        guard let value = optional(index) else { return nil }
        guard let list = value.array else { throw Aria2RPC.Failure.failed("The parameter at \(index) has wrong type.") }
        return Set(list.compactMap(\.string))
    }

    /// An options struct, when given: each value a string, or for `header` a list of them.
    func options(_ index: Int) throws -> [String: JSONValue] {
        guard let value = optional(index) else { return [:] }
        guard let options = value.object else {
            throw Aria2RPC.Failure.failed("The parameter at \(index) has wrong type.")
        }
        return options
    }
}
