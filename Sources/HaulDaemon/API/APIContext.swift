import Foundation
import HTTPTypes
import Haul
import HaulWire
import HaulWireMapping
import Hummingbird
import NIOCore

/// The request context of the daemon's API: Hummingbird's basics, with Haul's JSON (sorted
/// keys, ISO 8601 dates) for every answer.
struct APIContext: RequestContext {
    var coreContext: CoreRequestContextStorage

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
    }

    var responseEncoder: JSONEncoder { HaulJSON.encoder() }
}

/// Every ``HaulError`` a handler throws answers as the API's JSON failure, with the status
/// its code calls for: 404 for ``HaulError/Code/notFound``, 409 for a conflict, 500 when
/// the store failed, 400 for everything else a client sent.
extension HaulError: HTTPResponseError {
    public var status: HTTPResponse.Status {
        switch code {
        case .notFound: .notFound
        case .busy, .destinationExists, .revoked: .conflict
        case .store: .internalServerError
        default: .badRequest
        }
    }

    public func response(from request: Request, context: some RequestContext) throws -> Response {
        APIFailure.response(API.Failure(error: description, code: code.description), status: status)
    }
}

/// A request body over ``APIFailure/maxBodySize``: 413, with a sentence.
struct BodyTooLarge: HTTPResponseError {
    var status: HTTPResponse.Status { .contentTooLarge }

    func response(from request: Request, context: some RequestContext) throws -> Response {
        let failure = API.Failure(
            error: "The request body is larger than \(APIFailure.maxBodySize >> 20) MiB; send fewer downloads at once",
            code: "tooLarge"
        )
        return APIFailure.response(failure, status: status)
    }
}

/// The API's JSON failures.
enum APIFailure {
    /// The largest request body the API reads (16 MiB: about 50,000 downloads in one add).
    static let maxBodySize = 16 << 20

    static func response(_ failure: API.Failure, status: HTTPResponse.Status) -> Response {
        let data = (try? HaulJSON.encoder().encode(failure)) ?? Data("{}".utf8)
        return Response(
            status: status,
            headers: [.contentType: "application/json"],
            body: .init(byteBuffer: ByteBuffer(bytes: data))
        )
    }

    /// Any error as the API's failure: Haul's own and Hummingbird's keep their status; any
    /// other is the daemon's fault (500), said in one sentence.
    static func response(for error: any Error, request: Request, context: some RequestContext) -> Response {
        if let error = error as? any HTTPResponseError, !(error is HTTPError),
            let response = try? error.response(from: request, context: context)
        {
            return response
        }
        if let error = error as? HTTPError {
            return response(
                API.Failure(error: error.body ?? "HTTP \(error.status.code)", code: "invalidArgument"),
                status: error.status
            )
        }
        let failure = HaulError(.store, "The daemon could not answer this request", underlying: error)
        return response(
            API.Failure(error: failure.description, code: failure.code.description),
            status: .internalServerError
        )
    }
}

// What the handlers answer with, encoded by the context's encoder.
extension API.Task: ResponseEncodable {}
extension API.Status: ResponseEncodable {}
extension API.Health: ResponseEncodable {}
extension API.Settings: ResponseEncodable {}
extension API.Acknowledgement: ResponseEncodable {}
extension API.Stopping: ResponseEncodable {}
extension API.LoginLink: ResponseEncodable {}
extension API.Drain: ResponseEncodable {}
