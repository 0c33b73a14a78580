import AttachmentSync
import Foundation

/// The seam between the adapters and an HTTP client library: one request out, one response head back,
/// its body streamed after.
///
/// Everything above it (signing, error classification, resume, ranges, the slow-transfer watchdog, the
/// download bandwidth cap, hashing) is the adapters' and the transport's, written once; an engine only
/// moves bytes. Two engines exist: AsyncHTTPClient's (servers and tools) and URLSession's (apps that do not
/// want SwiftNIO, and the system's background transfers).
///
/// An engine's contract:
/// - It never follows a redirect (a redirect would resend a signed request elsewhere) and never decodes a
///   `Content-Encoding`: the body is the bytes the server sent.
/// - It sends exactly the headers it is given (plus what HTTP/1.1 needs: `Host`, `Content-Length`), and a
///   body of the length the request says.
/// - ``execute(_:)`` returns once the response head arrived, whatever its status.
/// - A cancelled task ends the request and throws `CancellationError`; any other error thrown means the
///   server could not be reached or did not answer in time (the transport classifies it as such).
/// - A response body that is dropped before it was read to the end ends the request (its connection is
///   not reused for a half-read response).
package protocol HTTPEngine: Sendable {
    /// Sends `request` and returns the response once its head arrived; its body streams after.
    func execute(_ request: HTTPEngineRequest) async throws -> HTTPEngineResponse

    /// Ends the engine: open connections closed, later requests refused. Calling it again does nothing.
    func shutdown() async throws

    /// Starts ``shutdown()`` without waiting for it (for an adapter released without being shut down).
    func shutdownInBackground()
}

/// An HTTP method.
package struct HTTPRequestMethod: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    package var rawValue: String

    package init(rawValue: String) {
        self.rawValue = rawValue
    }

    package static let get = HTTPRequestMethod(rawValue: "GET")
    package static let head = HTTPRequestMethod(rawValue: "HEAD")
    package static let put = HTTPRequestMethod(rawValue: "PUT")
    package static let post = HTTPRequestMethod(rawValue: "POST")
    package static let delete = HTTPRequestMethod(rawValue: "DELETE")
    package static let propfind = HTTPRequestMethod(rawValue: "PROPFIND")

    package var description: String { rawValue }
}

/// An HTTP response status: its code.
package struct HTTPStatus: Hashable, Sendable, CustomStringConvertible {
    package var code: Int

    package init(code: Int) {
        self.code = code
    }

    package static let ok = HTTPStatus(code: 200)
    package static let created = HTTPStatus(code: 201)
    package static let noContent = HTTPStatus(code: 204)
    package static let partialContent = HTTPStatus(code: 206)
    package static let multistatus = HTTPStatus(code: 207)
    package static let unauthorized = HTTPStatus(code: 401)
    package static let forbidden = HTTPStatus(code: 403)
    package static let notFound = HTTPStatus(code: 404)
    package static let methodNotAllowed = HTTPStatus(code: 405)
    package static let conflict = HTTPStatus(code: 409)
    package static let gone = HTTPStatus(code: 410)
    package static let preconditionFailed = HTTPStatus(code: 412)
    package static let rangeNotSatisfiable = HTTPStatus(code: 416)
    package static let internalServerError = HTTPStatus(code: 500)
    package static let notImplemented = HTTPStatus(code: 501)
    package static let serviceUnavailable = HTTPStatus(code: 503)

    /// Whether the code is 2xx.
    package var isSuccess: Bool { (200..<300).contains(code) }

    package var description: String { String(code) }
}

/// A list of header fields in order; names compare without regard to case.
package struct HTTPHeaderFields: Sendable, Sequence, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral {
    package private(set) var fields: [(name: String, value: String)]

    package init(_ fields: [(name: String, value: String)] = []) {
        self.fields = fields
    }

    package init(arrayLiteral elements: (name: String, value: String)...) {
        self.fields = elements
    }

    package init(dictionaryLiteral elements: (String, String)...) {
        self.fields = elements.map { (name: $0.0, value: $0.1) }
    }

    /// The first value of the header `name`, or `nil`.
    package func first(name: String) -> String? {
        fields.first { $0.name.caseInsensitiveCompare(name) == .orderedSame }?.value
    }

    /// Every value of the header `name`, in order.
    package subscript(name: String) -> [String] {
        fields.filter { $0.name.caseInsensitiveCompare(name) == .orderedSame }.map(\.value)
    }

    /// Adds a field (a header may occur more than once).
    package mutating func add(name: String, value: String) {
        fields.append((name, value))
    }

    /// Sets the header `name` to `value` alone: its other fields removed, the value in place of the first.
    package mutating func replaceOrAdd(name: String, value: String) {
        let named = { (field: (name: String, value: String)) in field.name.caseInsensitiveCompare(name) == .orderedSame
        }
        guard let first = fields.firstIndex(where: named) else { return add(name: name, value: value) }
        fields[first].value = value
        fields = fields.enumerated().filter { $0.offset == first || !named($0.element) }.map(\.element)
    }

    /// Removes every field named `name`.
    package mutating func remove(name: String) {
        fields.removeAll { $0.name.caseInsensitiveCompare(name) == .orderedSame }
    }

    package func makeIterator() -> IndexingIterator<[(name: String, value: String)]> {
        fields.makeIterator()
    }
}

/// A request for an ``HTTPEngine``.
package struct HTTPEngineRequest: Sendable {
    package var method: HTTPRequestMethod
    /// The whole URL, query included, as sent (already percent-encoded).
    package var url: String
    package var headers: HTTPHeaderFields
    package var body: HTTPEngineRequestBody

    package init(
        method: HTTPRequestMethod, url: String, headers: HTTPHeaderFields = [], body: HTTPEngineRequestBody = .none
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
    }
}

/// What a request sends.
package enum HTTPEngineRequestBody: Sendable {
    /// No body (no `Content-Length` either).
    case none
    /// These bytes (an empty `Data` sends `Content-Length: 0`).
    case bytes(Data)
    /// A byte range of a file, read as it is sent.
    case file(HTTPFileBody)

    /// How many bytes the body holds.
    package var length: Int64 {
        switch self {
        case .none: 0
        case .bytes(let data): Int64(data.count)
        case .file(let file): file.length
        }
    }
}

/// A byte range of a file sent as a request's body, read through the core's file layer while it is sent, a
/// chunk at a time (an engine that cannot stream a range may read it whole: a part is bounded).
package struct HTTPFileBody: Sendable {
    package var url: URL
    package var offset: Int64
    package var length: Int64
    /// The file layer the file is read through.
    package var files: any FileOperations
    /// The upload bandwidth cap the bytes wait for before they go, or `nil`: the one of the task that made
    /// the body (an engine may send it from a task or thread of its own).
    package var throttle: BandwidthThrottle?
    /// Called with the number of bytes handed to the network each time some are (for progress and the
    /// slow-transfer watchdog). The counts of one attempt add up to at most ``length``.
    package var onChunk: @Sendable (Int) -> Void

    package init(
        url: URL, offset: Int64, length: Int64, files: any FileOperations,
        throttle: BandwidthThrottle? = BandwidthThrottle.current, onChunk: @escaping @Sendable (Int) -> Void
    ) {
        self.url = url
        self.offset = offset
        self.length = length
        self.files = files
        self.throttle = throttle
        self.onChunk = onChunk
    }
}

/// A response from an ``HTTPEngine``: its head, and its body to stream.
package struct HTTPEngineResponse: Sendable {
    package var status: HTTPStatus
    package var headers: HTTPHeaderFields
    package var body: HTTPResponseBody

    package init(status: HTTPStatus, headers: HTTPHeaderFields, body: HTTPResponseBody) {
        self.status = status
        self.headers = headers
        self.body = body
    }
}

/// A response's body: its chunks, in order, as they arrive. Read it once.
package struct HTTPResponseBody: AsyncSequence, Sendable {
    package typealias Element = Data

    /// Produces the next chunk, `nil` at the end.
    package typealias NextChunk = @Sendable () async throws -> Data?

    private let next: NextChunk

    /// A body whose chunks `next` produces; `next` ends the request when its owner releases it unread (an
    /// engine keeps that in the object `next` captures).
    package init(next: @escaping NextChunk) {
        self.next = next
    }

    /// An empty body.
    package static var empty: HTTPResponseBody { HTTPResponseBody { nil } }

    package struct AsyncIterator: AsyncIteratorProtocol {
        let next: NextChunk

        package mutating func next() async throws -> Data? {
            try await next()
        }
    }

    package func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(next: next)
    }

    /// The whole body, when it holds at most `limit` bytes; throws ``HTTPBodyTooLarge`` as soon as it is
    /// longer.
    package func collect(upTo limit: Int) async throws -> Data {
        var collected = Data()
        for try await chunk in self {
            guard collected.count + chunk.count <= limit else { throw HTTPBodyTooLarge(limit: limit) }
            collected.append(chunk)
        }
        return collected
    }
}

/// A response body longer than the caller would read into memory.
package struct HTTPBodyTooLarge: Error, Sendable {
    package var limit: Int
}
