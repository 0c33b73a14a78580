import AsyncHTTPClient
import AttachmentSync
import AttachmentSyncHTTP
import Foundation
import Logging
import NIOCore
import NIOFoundationEssentialsCompat
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
                ByteBufferChunks(base: FileChunks(file), loops: Array(client.eventLoopGroup.makeIterator())),
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
            // A view of the buffer's bytes, not a copy: the `Data` keeps the buffer's storage alive, and the
            // client copies before it writes into storage still referenced.
            return Data(buffer: buffer, byteTransferStrategy: .noCopy)
        } catch let error as HTTPClientError where error == .cancelled {
            throw CancellationError()
        }
    }
}

/// A file range's chunks as the `ByteBuffer`s AsyncHTTPClient streams, read no further ahead than the
/// connection has taken.
///
/// AsyncHTTPClient hands each chunk to the connection's event loop and asks for the next at once, until
/// the event loop reports the connection unwritable and pauses the stream. While the event loop is busy
/// or not scheduled (two cores shared with the server, say), that report waits behind the chunks already
/// handed over, and a fast disk fills its queue: up to a whole part in memory per connection, seen as
/// peaks of 20 MiB in P9. So every ``readAhead`` chunks, before reading the next, each iterator waits
/// until every event loop of the client has run what was queued on it before: the chunks handed over are
/// then with their connections, which paused the stream if they could take no more.
struct ByteBufferChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    let base: FileChunks
    /// The client's event loops.
    let loops: [any EventLoop]
    /// How many chunks (of 256 KiB) are read between two waits for the event loops: enough to keep a
    /// connection busy across a wait (one chunk at a time measured 9 % slower in P9), few enough to bound
    /// what a connection may have queued to 1 MiB more than it takes.
    static let readAhead = 4

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: FileChunks.AsyncIterator
        let loops: [any EventLoop]
        /// Chunks handed over since the event loops were last waited for.
        var handedOver = 0

        mutating func next() async throws -> ByteBuffer? {
            if handedOver >= ByteBufferChunks.readAhead {
                // Queued on every loop at once and awaited together: one hop's wait, however many loops.
                let passes = loops.map { $0.submit {} }
                for pass in passes { try await pass.get() }
                handedOver = 0
            }
            // Read straight into the buffer the client sends: no `Data` in between, no copy.
            let chunk = try await base.next { handle, count in
                var buffer = ByteBufferAllocator().buffer(capacity: count)
                let read = try buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count) { space in
                    try readFully(handle.fileDescriptor, into: UnsafeMutableRawBufferPointer(rebasing: space[..<count]))
                }
                return (buffer, read)
            }
            if chunk != nil { handedOver += 1 }
            return chunk
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(base: base.makeAsyncIterator(), loops: loops)
    }
}
