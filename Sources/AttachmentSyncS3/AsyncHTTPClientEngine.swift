import AsyncHTTPClient
import AttachmentSync
import AttachmentSyncHTTP
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// The ``HTTPEngine`` on AsyncHTTPClient: the transport for servers and tools (SwiftNIO, HTTP/1.1 and
/// HTTP/2, its own connection pool).
package struct AsyncHTTPClientEngine: HTTPEngine {
    /// The logger handed to the HTTP client, which discards everything: at trace level the client logs each
    /// request's head, whose URL (a presigned one's signature) and headers (a session token) are credentials.
    static let clientLogger = Logger(label: "AttachmentSyncS3.HTTPClient") { _ in SwiftLogNoOpLogHandler() }

    /// The client requests go through.
    package let client: HTTPClient
    /// Whether ``shutdown()`` shuts ``client`` down: the engine made it (a client passed in stays its owner's).
    let ownsClient: Bool

    /// An engine on a client of its own: redirects off (a redirect would resend a signed request elsewhere),
    /// no decompression, the given timeouts, up to 16 connections per host.
    package init(connectTimeout: Duration, requestTimeout: Duration) {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.timeout = HTTPClient.Configuration.Timeout(
            connect: Self.timeAmount(connectTimeout), read: Self.timeAmount(requestTimeout),
            write: Self.timeAmount(requestTimeout))
        configuration.decompression = .disabled
        // AsyncHTTPClient keeps 8 connections per host by default; a queue runs up to
        // `maxConcurrentTransfers` transfers (and a large file `partConcurrency` parts) at once, and requests
        // beyond the limit wait for a connection. 16 measured faster for many small downloads (P8).
        configuration.connectionPool.concurrentHTTP1ConnectionsPerHostSoftLimit = 16
        client = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
        ownsClient = true
    }

    /// An engine on `client`, which stays its owner's to configure and shut down.
    package init(client: HTTPClient) {
        self.client = client
        ownsClient = false
    }

    /// `duration` as NIO's `TimeAmount`, saturated: a configured timeout of any length never traps.
    static func timeAmount(_ duration: Duration) -> TimeAmount {
        .nanoseconds(duration.clampedNanoseconds)
    }

    package func execute(_ request: HTTPEngineRequest) async throws -> HTTPEngineResponse {
        var sent = HTTPClientRequest(url: request.url)
        sent.method = HTTPMethod(rawValue: request.method.rawValue)
        for (name, value) in request.headers {
            sent.headers.add(name: name, value: value)
        }
        switch request.body {
        case .none:
            break
        case .bytes(let data):
            sent.body = .bytes(ByteBuffer(bytes: data))
        case .file(let file):
            sent.body = .stream(
                ByteBufferChunks(base: FileChunks(file)),
                length: .known(file.length))
        }
        let response: HTTPClientResponse
        do {
            response = try await client.execute(sent, deadline: .distantFuture, logger: Self.clientLogger)
        } catch let error as HTTPClientError where error == .cancelled {
            throw CancellationError()
        }
        let headers = HTTPHeaderFields(response.headers.map { (name: $0.name, value: $0.value) })
        let body = BodyReader(response.body.makeAsyncIterator())
        return HTTPEngineResponse(
            status: HTTPStatus(code: Int(response.status.code)), headers: headers,
            body: HTTPResponseBody { try await body.next() })
    }

    package func shutdown() async throws {
        guard ownsClient else { return }
        do {
            try await client.shutdown()
        } catch let error as HTTPClientError where error == .alreadyShutdown {
            return
        }
    }

    package func shutdownInBackground() {
        guard ownsClient else { return }
        client.shutdown { _ in }
    }
}

/// Reads one AsyncHTTPClient response body, a chunk at a time, as `Data`.
///
/// `@unchecked Sendable`: the body is read by one task at a time (``HTTPResponseBody`` is read once, by its
/// single consumer, whose `next()` calls never overlap), so the iterator is never touched concurrently;
/// the lock only makes the hand-over between the tasks that read in turn visible.
private final class BodyReader: @unchecked Sendable {
    private var iterator: HTTPClientResponse.Body.AsyncIterator
    private let lock = NSLock()

    init(_ iterator: HTTPClientResponse.Body.AsyncIterator) {
        self.iterator = iterator
    }

    func next() async throws -> Data? {
        var iterator = lock.withLock { self.iterator }
        defer { lock.withLock { self.iterator = iterator } }
        do {
            guard let buffer = try await iterator.next() else { return nil }
            return Data(buffer.readableBytesView)
        } catch let error as HTTPClientError where error == .cancelled {
            throw CancellationError()
        }
    }
}

/// A file range's chunks as the `ByteBuffer`s AsyncHTTPClient streams.
private struct ByteBufferChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    let base: FileChunks

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: FileChunks.AsyncIterator

        mutating func next() async throws -> ByteBuffer? {
            try await base.next().map { ByteBuffer(bytes: $0) }
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator())
    }
}
