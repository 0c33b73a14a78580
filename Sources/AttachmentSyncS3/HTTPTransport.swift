import AsyncHTTPClient
import AttachmentSync
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// A request about to be sent, as seen by a test's observer: enough to count requests and to fail chosen
/// ones. Internal: tests reach it through `@testable import`.
struct RequestEvent: Sendable {
    /// The operation: `PutObject`, `UploadPart`, `GetObject`, `PUT`…
    var operation: String
    /// The HTTP method.
    var method: String
    /// The object key or path.
    var object: String
    /// The part number, for `UploadPart`.
    var partNumber: Int?
}

/// Sees every request before it is sent; throwing fails the request with that error, as if the server or
/// the network had failed.
typealias RequestObserver = @Sendable (RequestEvent) throws -> Void

/// The plumbing both adapters share: one `HTTPClient`, sending with error classification, and streaming
/// response bodies into files.
struct HTTPTransport: Sendable {
    /// The largest error body read for its code and message.
    static let maxErrorBody = 64 * 1024

    let client: HTTPClient
    /// `S3` or `HTTP`, for messages.
    let service: String
    let logger: Logger
    let observer: RequestObserver?

    /// An HTTP client for an adapter to own: redirects off (a redirect would resend a signed request
    /// elsewhere), the given timeouts.
    static func makeClient(connectTimeout: Duration, requestTimeout: Duration) -> HTTPClient {
        var configuration = HTTPClient.Configuration()
        configuration.redirectConfiguration = .disallow
        configuration.timeout = HTTPClient.Configuration.Timeout(
            connect: timeAmount(connectTimeout), read: timeAmount(requestTimeout), write: timeAmount(requestTimeout))
        configuration.decompression = .disabled
        return HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: configuration)
    }

    static func timeAmount(_ duration: Duration) -> TimeAmount {
        let (seconds, attoseconds) = duration.components
        return .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }

    /// Sends `request`; returns the response when `accepts` its status, and otherwise throws the classified
    /// ``AttachmentError`` (reading at most 64 KiB of the error body for its code and message).
    func send(
        _ request: HTTPClientRequest, event: RequestEvent, attachmentId: String?,
        accepts: (HTTPResponseStatus) -> Bool = { (200..<300).contains($0.code) }
    ) async throws -> HTTPClientResponse {
        try Task.checkCancellation()
        try observer?(event)
        logger.debug(
            "request",
            metadata: ["service": "\(service)", "operation": "\(event.operation)", "object": "\(event.object)"])
        let response: HTTPClientResponse
        do {
            response = try await client.execute(request, deadline: .distantFuture, logger: logger)
        } catch {
            let mapped = HTTPErrorClassification.transportError(
                error, service: service, operation: event.operation, object: event.object, attachmentId: attachmentId)
            logger.debug("request failed", metadata: ["operation": "\(event.operation)", "error": "\(mapped)"])
            throw mapped
        }
        guard accepts(response.status) else {
            let body = try? await response.body.collect(upTo: Self.maxErrorBody)
            let error = HTTPErrorClassification.error(
                status: response.status, headers: response.headers, body: body, service: service,
                operation: event.operation, object: event.object, attachmentId: attachmentId)
            logger.debug("request refused", metadata: ["operation": "\(event.operation)", "error": "\(error)"])
            throw error
        }
        return response
    }

    /// Reads a whole (small) response body, mapping a broken connection to `.remoteUnavailable`.
    func collect(_ response: HTTPClientResponse, event: RequestEvent, attachmentId: String?, upTo limit: Int)
        async throws -> ByteBuffer
    {
        do {
            return try await response.body.collect(upTo: limit)
        } catch {
            throw HTTPErrorClassification.transportError(
                error, service: service, operation: event.operation, object: event.object, attachmentId: attachmentId)
        }
    }

    /// Downloads into `destination`: the whole content when `offset` is 0 (the file is created or replaced),
    /// otherwise the content from `offset` on, appended to the first `offset` bytes the file holds.
    ///
    /// `send` makes the GET, with the given `Range` header value when there is one, accepting the statuses it
    /// is given. A server that ignores the range (answers 200) has its whole content written from the start; an
    /// offset at or past the end (416) appends nothing. Progress counts the whole file.
    func download(
        to destination: URL, from offset: Int64, event: RequestEvent, attachmentId: String?,
        progress: @escaping TransferProgressHandler,
        send: (_ range: String?, _ accepts: @escaping (HTTPResponseStatus) -> Bool) async throws -> HTTPClientResponse
    ) async throws {
        if offset == 0 {
            let response = try await send(nil) { $0 == .ok }
            let handle = try FileIO.openForWriting(destination, at: 0)
            defer { try? handle.close() }
            let length = response.headers.first(name: "content-length").flatMap { Int64($0) }
            try await write(
                response, to: handle, url: destination, base: 0, expected: length, total: length,
                event: event, attachmentId: attachmentId, progress: progress)
            return
        }
        let existing = (try? FileIO.size(of: destination)) ?? 0
        guard existing >= offset else {
            throw AttachmentError(
                code: .fileSystem,
                message: "cannot resume at byte \(offset): \(destination.path) holds only \(existing) bytes",
                path: destination.path)
        }
        let response = try await send("bytes=\(offset)-") { [.ok, .partialContent, .rangeNotSatisfiable].contains($0) }
        let handle = try FileIO.openForWriting(destination, at: offset)
        defer { try? handle.close() }
        let contentRange = response.headers.first(name: "content-range").flatMap(ContentRange.init)
        let length = response.headers.first(name: "content-length").flatMap { Int64($0) }
        switch response.status {
        case .partialContent:
            guard let contentRange, contentRange.start == offset else {
                _ = try? await response.body.collect(upTo: Self.maxErrorBody)
                throw AttachmentError(
                    code: .remoteFailure,
                    message: "\(service) answered a read from byte \(offset) of \(String(reflecting: event.object)) "
                        + "with another range", attachmentId: attachmentId, name: event.object)
            }
            try await write(
                response, to: handle, url: destination, base: offset, expected: length,
                total: contentRange.total, event: event, attachmentId: attachmentId, progress: progress)
        case .ok:
            try FileIO.fileSystem(destination) {
                try handle.truncate(atOffset: 0)
                try handle.seek(toOffset: 0)
            }
            try await write(
                response, to: handle, url: destination, base: 0, expected: length, total: length,
                event: event, attachmentId: attachmentId, progress: progress)
        default:  // 416: nothing left to read
            _ = try? await response.body.collect(upTo: Self.maxErrorBody)
            progress(TransferProgress(completedBytes: offset, totalBytes: contentRange?.total ?? offset))
        }
    }

    /// Writes the response body to `handle` chunk by chunk, flushes it to disk and checks its length.
    private func write(
        _ response: HTTPClientResponse, to handle: FileHandle, url: URL, base: Int64, expected: Int64?,
        total: Int64?, event: RequestEvent, attachmentId: String?, progress: TransferProgressHandler
    ) async throws {
        var written: Int64 = 0
        progress(TransferProgress(completedBytes: base, totalBytes: total))
        do {
            for try await chunk in response.body {
                try FileIO.fileSystem(url) { try handle.write(contentsOf: Data(chunk.readableBytesView)) }
                written += Int64(chunk.readableBytes)
                progress(TransferProgress(completedBytes: base + written, totalBytes: total))
            }
        } catch {
            throw HTTPErrorClassification.transportError(
                error, service: service, operation: event.operation, object: event.object, attachmentId: attachmentId)
        }
        try FileIO.fileSystem(url) { try handle.synchronize() }
        if let expected, written != expected {
            throw AttachmentError(
                code: .remoteUnavailable,
                message: "\(service) \(event.operation) of \(String(reflecting: event.object)) ended after "
                    + "\(written) of \(expected) bytes", attachmentId: attachmentId, name: event.object)
        }
    }
}

/// A `Content-Range` header: `bytes 100-199/1000`, or `bytes */1000` for an unsatisfiable range.
struct ContentRange: Equatable {
    var start: Int64?
    var end: Int64?
    var total: Int64?

    init?(_ header: String) {
        let value = header.trimmingCharacters(in: .whitespaces)
        guard value.lowercased().hasPrefix("bytes ") else { return nil }
        let parts = value.dropFirst("bytes ".count).split(separator: "/", maxSplits: 1)
        guard parts.count == 2 else { return nil }
        total = Int64(parts[1])
        if parts[0] != "*" {
            let bounds = parts[0].split(separator: "-", maxSplits: 1)
            guard bounds.count == 2, let start = Int64(bounds[0]), let end = Int64(bounds[1]) else { return nil }
            self.start = start
            self.end = end
        }
    }
}
