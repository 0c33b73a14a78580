import AttachmentSync
import Crypto
import Foundation
import Logging

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

/// The plumbing both adapters share: one ``HTTPEngine``, sending with error classification, and streaming
/// response bodies into files.
///
/// Its dependencies are injected: every file it reads or writes goes through ``files`` (the core's file
/// layer), the slow-transfer watchdog measures with ``clock``, and the date a `Retry-After` is counted from
/// is ``now``; tests pass their own.
struct HTTPTransport: Sendable {
    /// Sends a download's `GET` with the given `Range` header value (or none) and conditional headers,
    /// returning the response when `accepts` its status.
    typealias DownloadRequest =
        @Sendable (
            _ range: String?, _ conditions: [(name: String, value: String)],
            _ accepts: @escaping @Sendable (HTTPStatus) -> Bool
        ) async throws -> HTTPEngineResponse

    /// The largest error body read for its code and message.
    static let maxErrorBody = 64 * 1024

    /// The engine requests go through: AsyncHTTPClient's or URLSession's.
    let engine: any HTTPEngine
    /// `S3` or `HTTP`, for messages.
    let service: String
    let logger: Logger
    let observer: RequestObserver?
    /// The slowest a transfer may move before it is stopped (see ``watched(_:attachmentId:_:)``), or `nil`.
    var minimumRate: MinimumTransferRate? = nil
    /// The clock the slow-transfer watchdog measures its windows with.
    var clock: any Clock<Duration> = ContinuousClock()
    /// The file layer every download is written through and every upload read through.
    var files: any FileOperations = SystemFileOperations()
    /// The current date: an HTTP-date `Retry-After` is counted from it.
    var now: @Sendable () -> Date = { Date() }

    /// Sends `request`; returns the response when `accepts` its status, and otherwise throws the classified
    /// `AttachmentError` (reading at most 64 KiB of the error body for its code and message).
    func send(
        _ request: HTTPEngineRequest, event: RequestEvent, attachmentId: String?,
        accepts: (HTTPStatus) -> Bool = { $0.isSuccess }
    ) async throws -> HTTPEngineResponse {
        try Task.checkCancellation()
        try observer?(event)
        logger.debug(
            "request",
            metadata: ["service": "\(service)", "operation": "\(event.operation)", "object": "\(event.object)"])
        let response: HTTPEngineResponse
        do {
            response = try await engine.execute(request)
        } catch {
            let mapped = HTTPErrorClassification.transportError(
                error, service: service, operation: event.operation, object: event.object, attachmentId: attachmentId)
            logger.debug("request failed", metadata: ["operation": "\(event.operation)", "error": "\(mapped)"])
            throw mapped
        }
        guard accepts(response.status) else {
            let body = try? await response.body.collect(upTo: Self.maxErrorBody)
            let error = self.error(for: response, body: body, event: event, attachmentId: attachmentId)
            logger.debug("request refused", metadata: ["operation": "\(event.operation)", "error": "\(error)"])
            throw error
        }
        return response
    }

    /// The classified error of a response whose status the caller does not accept (see
    /// ``HTTPErrorClassification/error(status:headers:body:service:operation:object:attachmentId:now:)``),
    /// naming `object` (the event's object when `nil`), with a `Retry-After` date counted from ``now``.
    /// `status` replaces the response's: S3 answers some failures with 200 and the error in the body.
    func error(
        for response: HTTPEngineResponse, body: Data?, event: RequestEvent, attachmentId: String?,
        object: String? = nil, status: HTTPStatus? = nil
    ) -> AttachmentError {
        HTTPErrorClassification.error(
            status: status ?? response.status, headers: response.headers, body: body, service: service,
            operation: event.operation, object: object ?? event.object, attachmentId: attachmentId, now: now())
    }

    /// Reads a whole (small) response body, mapping a broken connection to `.remoteUnavailable`.
    func collect(_ response: HTTPEngineResponse, event: RequestEvent, attachmentId: String?, upTo limit: Int)
        async throws -> Data
    {
        do {
            return try await response.body.collect(upTo: limit)
        } catch {
            throw HTTPErrorClassification.transportError(
                error, service: service, operation: event.operation, object: event.object, attachmentId: attachmentId)
        }
    }

    /// The largest object the `Data` form of a download collects into memory: 1 GiB.
    static let maximumInMemoryDownload: Int64 = 1 << 30

    /// Reads a whole object's body into memory, up to ``maximumInMemoryDownload`` (and never more than its
    /// `Content-Length`); a larger object fails with `unsupported` (the streaming form has no limit).
    func collectObject(_ response: HTTPEngineResponse, event: RequestEvent, attachmentId: String?) async throws
        -> Data
    {
        let length = response.headers.first(name: "content-length").flatMap { Int64($0) }
        func tooLarge() -> AttachmentError {
            AttachmentError(
                code: .unsupported,
                message: "\(service) \(event.operation) of \(String(reflecting: event.object)) is larger than the "
                    + "\(Self.maximumInMemoryDownload) bytes a download into memory may hold; use the streaming "
                    + "downloadFile(attachment:into:from:progress:)", attachmentId: attachmentId, name: event.object)
        }
        if let length, length > Self.maximumInMemoryDownload { throw tooLarge() }
        do {
            let data = try await response.body.collect(upTo: Int(length ?? Self.maximumInMemoryDownload))
            try await BandwidthThrottle.current?.take(data.count)
            return data
        } catch is HTTPBodyTooLarge {
            throw tooLarge()
        } catch {
            throw HTTPErrorClassification.transportError(
                error, service: service, operation: event.operation, object: event.object, attachmentId: attachmentId)
        }
    }

    /// An adapter's download of `object` into `destination`, from `offset` on, under ``minimumRate`` (see
    /// ``watched(_:attachmentId:_:)``, whose watch covers fetching a stored SHA-256 too): ``download(to:from:
    /// expectedSize:requiresValidator:event:attachmentId:meter:parallel:progress:send:head:)`` with the
    /// attachment's known size, returning the object's size, its stored SHA-256 and what was written.
    func downloadObject(
        _ object: ObjectDownload, into destination: URL, from offset: Int64, requiresValidator: Bool,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        let attachment = object.attachment
        return try await watched(object.event, attachmentId: attachment.id) { meter in
            var sha256: String?
            if case .fetched(let fetch) = object.storedSHA256 { sha256 = try await fetch() }
            let downloaded = try await self.download(
                to: destination, from: max(0, offset), expectedSize: attachment.size,
                requiresValidator: requiresValidator, event: object.event, attachmentId: attachment.id, meter: meter,
                parallel: object.parallel, progress: progress
            ) { range, conditions, accepts in
                try await object.request(.get, (range.map { [("range", $0)] } ?? []) + conditions, accepts)
            } head: { conditions in
                try await object.request(.head, conditions, { _ in true })
            }
            if case .header(let name) = object.storedSHA256 {
                sha256 = validSHA256(downloaded.headers.first(name: name))
            }
            return RemoteObjectInfo(
                size: downloaded.size, sha256: sha256, writtenSize: downloaded.writtenSize,
                writtenSHA256: downloaded.writtenSHA256)
        }
    }

    /// Downloads into `destination`: the whole content when `offset` is 0 (the file is created or replaced),
    /// otherwise the content from `offset` on, appended to the first `offset` bytes the file holds, when the
    /// object is provably the one those bytes came from.
    ///
    /// While a download of more than ``smallestResumable`` bytes is incomplete, what identifies the object (its
    /// `ETag`, else its `Last-Modified`, and its size) is kept beside `destination` in a small file
    /// (``resumeValidatorURL(for:)``), removed once the body is complete. A resume sends it as `If-Match` (or `If-Unmodified-Since`), so a server answers 412
    /// when the object changed; the download then starts over from byte 0 rather than splice two versions.
    /// The same happens when a `206` does not cover exactly the rest of an object of the expected size, when
    /// no validator is kept and `requiresValidator` is `true`, and when a `416` (nothing left to read) is not
    /// confirmed by `head` to mean an unchanged object of exactly `offset` bytes. A server that ignores the
    /// range (answers 200) has its whole content written from the start.
    ///
    /// `send` makes the GET with the given `Range` header value (or none) and conditional headers, accepting
    /// the statuses it is given; `head` makes a HEAD request of the object with the given conditional headers.
    /// When `expectedSize` is known, an object of another size is refused (`integrityMismatch`) before its
    /// body is read. Progress counts the whole object.
    func download(
        to destination: URL, from offset: Int64, expectedSize: Int64?, requiresValidator: Bool, event: RequestEvent,
        attachmentId: String?, meter: TransferMeter, parallel: ParallelDownloads? = nil,
        progress: @escaping TransferProgressHandler,
        send: @escaping DownloadRequest,
        head: (_ conditions: [(name: String, value: String)]) async throws -> HTTPEngineResponse
    ) async throws -> DownloadedObject {
        let validatorURL = Self.resumeValidatorURL(for: destination)
        if offset > 0 {
            let existing = (try? files.size(ofFileAt: destination.path)) ?? 0
            guard existing >= offset else {
                throw AttachmentError(
                    code: .fileSystem,
                    message: "cannot resume at byte \(offset): \(destination.path) holds only \(existing) bytes",
                    path: destination.path)
            }
            let validator = ResumeValidator.load(from: validatorURL, files: files)
            if validator != nil || !requiresValidator {
                if let resumed = try await resume(
                    destination, from: offset, validator: validator, expectedSize: expectedSize, event: event,
                    attachmentId: attachmentId, meter: meter, parallel: parallel, progress: progress, send: send,
                    head: head)
                {
                    return resumed
                }
            } else {
                logger.debug(
                    "nothing tells the object is unchanged since the partial download; starting over",
                    metadata: ["object": "\(event.object)"])
            }
        }
        let response = try await send(nil, []) { $0 == .ok }
        return try await writeWhole(
            response, to: destination, expectedSize: expectedSize, event: event, attachmentId: attachmentId,
            meter: meter, parallel: parallel, progress: progress, send: send)
    }

    /// Continues a download from `offset`; `nil` when it must start over instead (the object changed, or the
    /// server's answer does not prove it did not).
    private func resume(
        _ destination: URL, from offset: Int64, validator: ResumeValidator?, expectedSize: Int64?,
        event: RequestEvent, attachmentId: String?, meter: TransferMeter, parallel: ParallelDownloads?,
        progress: @escaping TransferProgressHandler,
        send: @escaping DownloadRequest,
        head: (_ conditions: [(name: String, value: String)]) async throws -> HTTPEngineResponse
    ) async throws -> DownloadedObject? {
        let conditions = validator?.conditions ?? []
        let response = try await send("bytes=\(offset)-", conditions) {
            [.ok, .partialContent, .rangeNotSatisfiable, .preconditionFailed].contains($0)
        }
        func startOver(_ reason: String) async -> DownloadedObject? {
            _ = try? await response.body.collect(upTo: Self.maxErrorBody)
            logger.debug(
                "starting a resumed download over", metadata: ["object": "\(event.object)", "why": "\(reason)"])
            return nil
        }
        switch response.status {
        case .ok:
            return try await writeWhole(
                response, to: destination, expectedSize: expectedSize, event: event, attachmentId: attachmentId,
                meter: meter, parallel: parallel, progress: progress, send: send)
        case .partialContent:
            guard let range = response.headers.first(name: "content-range").flatMap(ContentRange.init),
                range.start == offset, let total = range.total, range.end == total - 1
            else { return await startOver("the 206 does not cover exactly the rest of the object") }
            guard validator?.size.map({ $0 == total }) ?? true, validator?.matches(response.headers) ?? true else {
                return await startOver("the object is not the one the partial download came from")
            }
            try refuse(total: total, expectedSize: expectedSize, event: event, attachmentId: attachmentId)
            let sink = DownloadSinks.current.flatMap { $0.accepts(total: total, from: offset) ? $0 : nil }
            let handle = try files.openDownload(destination, at: offset)
            defer { handle.close() }
            var noHasher: SHA256? = nil
            do {
                try await write(
                    response, to: handle, url: destination, base: offset, expected: total - offset, total: total,
                    sink: sink, hashing: &noHasher, event: event, attachmentId: attachmentId, meter: meter,
                    progress: progress)
            } catch {
                _ = sink?.keep(upTo: 0)
                throw error
            }
            try? files.removeFile(atPath: Self.resumeValidatorURL(for: destination).path)
            return DownloadedObject(size: total, headers: response.headers)
        case .rangeNotSatisfiable:
            _ = try? await response.body.collect(upTo: Self.maxErrorBody)
            // Nothing past `offset`: complete only if the object is exactly `offset` bytes, and unchanged.
            let confirmation = try await head(conditions)
            _ = try? await confirmation.body.collect(upTo: Self.maxErrorBody)
            let length = confirmation.headers.first(name: "content-length").flatMap { Int64($0) }
            guard confirmation.status == .ok, length == offset, validator?.matches(confirmation.headers) ?? true
            else {
                logger.debug(
                    "starting a resumed download over",
                    metadata: ["object": "\(event.object)", "why": "416, and the object is not \(offset) bytes"])
                return nil
            }
            try refuse(total: offset, expectedSize: expectedSize, event: event, attachmentId: attachmentId)
            try files.openDownload(destination, at: offset).close()
            try? files.removeFile(atPath: Self.resumeValidatorURL(for: destination).path)
            progress(TransferProgress(completedBytes: offset, totalBytes: offset))
            return DownloadedObject(size: offset, headers: confirmation.headers)
        default:  // 412: the object changed since the partial download
            return await startOver("the object changed (412)")
        }
    }

    /// Writes a `200` response's body to `destination` from byte 0, keeping a resume validator meanwhile.
    private func writeWhole(
        _ response: HTTPEngineResponse, to destination: URL, expectedSize: Int64?, event: RequestEvent,
        attachmentId: String?, meter: TransferMeter, parallel: ParallelDownloads?,
        progress: @escaping TransferProgressHandler,
        send: @escaping DownloadRequest
    ) async throws -> DownloadedObject {
        let length = response.headers.first(name: "content-length").flatMap { Int64($0) }
        if let length {
            try refuse(total: length, expectedSize: expectedSize, event: event, attachmentId: attachmentId)
        }
        // The tap hears of the new start before the file is cut: a follower freeing the old bytes it decrypted
        // (see `DownloadTap.unlessStartedOver(since:_:)`) never frees new ones.
        let tap = DownloadTap.current
        tap?.startedOver()
        // A wrapper that takes the bytes as they arrive (and decrypts them) is asked before the file is cut.
        let sink = DownloadSinks.current.flatMap { $0.accepts(total: length, from: 0) ? $0 : nil }
        do {
            return try await writeWhole(
                response, to: destination, length: length, expectedSize: expectedSize, tap: tap, sink: sink,
                event: event, attachmentId: attachmentId, meter: meter, parallel: parallel, progress: progress,
                send: send)
        } catch {
            // What the sink leaves in the file for a later try (the sink's own when it took the ranges).
            _ = sink?.keep(upTo: 0)
            throw error
        }
    }

    /// ``writeWhole(_:to:expectedSize:event:attachmentId:meter:parallel:progress:send:)`` once the tap and the
    /// sink heard of the new start.
    private func writeWhole(
        _ response: HTTPEngineResponse, to destination: URL, length: Int64?, expectedSize: Int64?,
        tap: DownloadTap?, sink: (any DownloadSink)?, event: RequestEvent, attachmentId: String?,
        meter: TransferMeter, parallel: ParallelDownloads?, progress: @escaping TransferProgressHandler,
        send: @escaping DownloadRequest
    ) async throws -> DownloadedObject {
        let validatorURL = Self.resumeValidatorURL(for: destination)
        let handle = try files.openDownload(destination, at: 0)
        defer { handle.close() }
        // A small object is fetched again whole rather than resumed: its validator file would cost more (a
        // file created and removed per download) than the bytes it could save.
        let validator =
            length.map { $0 <= Self.smallestResumable } == true
            ? nil : ResumeValidator(headers: response.headers, size: length)
        if let length, let validator, let parallel,
            Self.splits(response, length: length, validator: validator, plan: parallel)
        {
            handle.close()
            return try await downloadInRanges(
                response, to: destination, length: length, validator: validator, plan: parallel, sink: sink,
                event: event, attachmentId: attachmentId, meter: meter, progress: progress, send: send)
        }
        if let validator {
            validator.save(to: validatorURL, files: files)
        } else {
            try? files.removeFile(atPath: validatorURL.path)
        }
        // A wrapper that follows the file checks its bytes itself.
        var hasher: SHA256? = tap?.skipsDigest == true ? nil : SHA256()
        let written = try await write(
            response, to: handle, url: destination, base: 0, expected: length, total: length, limit: expectedSize,
            sink: sink, hashing: &hasher, event: event, attachmentId: attachmentId, meter: meter, progress: progress)
        if validator != nil { try? files.removeFile(atPath: validatorURL.path) }
        return DownloadedObject(
            size: length ?? written, headers: response.headers, writtenSize: written,
            writtenSHA256: hasher.map { FileStreaming.hex($0.finalize()) })
    }

    /// Throws `integrityMismatch` when the object's size is not the one expected.
    private func refuse(total: Int64, expectedSize: Int64?, event: RequestEvent, attachmentId: String?) throws {
        guard let expectedSize, total != expectedSize else { return }
        throw AttachmentError(
            code: .integrityMismatch,
            message: "\(service) serves \(String(reflecting: event.object)) as \(total) bytes; the attachment has "
                + "\(expectedSize)", attachmentId: attachmentId, name: event.object)
    }

    /// Writes the response body to `handle` chunk by chunk (feeding `hasher` too, when there is one) and checks
    /// its length (and, when there is a `limit`, that it never goes past it). Returns the bytes written. The
    /// file is not flushed: whoever relies on it flushes it (the queue does, before it verifies and commits a
    /// download).
    @discardableResult
    func write(
        _ response: HTTPEngineResponse, to handle: any FileWriter, url: URL, base: Int64, expected: Int64?,
        total: Int64?, limit: Int64? = nil, sink: (any DownloadSink)? = nil, hashing hasher: inout SHA256?,
        event: RequestEvent,
        attachmentId: String?, meter: TransferMeter, progress: TransferProgressHandler
    ) async throws -> Int64 {
        var written: Int64 = 0
        progress(TransferProgress(completedBytes: base, totalBytes: total))
        let throttle = BandwidthThrottle.current
        let tap = DownloadTap.current
        do {
            for try await chunk in response.body {
                try await throttle?.take(chunk.count)
                let count = Int64(chunk.count)
                if let limit, base + written + count > limit {
                    throw AttachmentError(
                        code: .integrityMismatch,
                        message: "\(service) \(event.operation) of \(String(reflecting: event.object)) sent more "
                            + "than the attachment's \(limit) bytes", attachmentId: attachmentId, name: event.object)
                }
                if let sink {
                    try await sink.write(chunk, at: base + written)
                } else {
                    try handle.write(chunk)
                    hasher?.update(data: chunk)
                }
                written += count
                tap?.written(upTo: base + written)
                meter.add(count)
                progress(TransferProgress(completedBytes: base + written, totalBytes: total))
            }
        } catch {
            throw HTTPErrorClassification.transportError(
                error, service: service, operation: event.operation, object: event.object, attachmentId: attachmentId)
        }
        if let expected, written != expected {
            throw AttachmentError(
                code: .remoteUnavailable,
                message: "\(service) \(event.operation) of \(String(reflecting: event.object)) ended after "
                    + "\(written) of \(expected) bytes", attachmentId: attachmentId, name: event.object)
        }
        return written
    }

    /// The size up to which a download keeps no resume validator, so that an interrupted one starts over:
    /// 128 KiB, where fetching the bytes again costs less than a file created and removed per download (on
    /// ext4, creating a file in a folder where many were removed in the last half minute takes ~1 ms of CPU).
    /// Above 64 KiB so that a 64 KiB file stored encrypted (64 KiB and a header and tags) is treated as the
    /// same file stored plain.
    static let smallestResumable: Int64 = 128 << 10

    /// Where the resume validator of a download into `destination` is kept: beside it, named
    /// `.attachment-sync-etag-<name>` (the name the queue keeps with a partial download and removes with it).
    static func resumeValidatorURL(for destination: URL) -> URL {
        destination.deletingLastPathComponent().appendingPathComponent(
            FileName.resumeValidatorName(for: destination.lastPathComponent))
    }

    // MARK: - Slow transfers

    /// Runs `body` (one transfer: its request, and the body it sends or receives) under
    /// ``minimumRate``: when fewer bytes than its minimum move through `body`'s meter in any window, the
    /// transfer is cancelled and fails with `remoteUnavailable`, so a server that trickles bytes cannot hold
    /// it (and the queue's transfer slot) for ever. Without a minimum, `body` just runs.
    func watched<T: Sendable>(
        _ event: RequestEvent, attachmentId: String?, _ body: @escaping @Sendable (TransferMeter) async throws -> T
    ) async throws -> T {
        let meter = TransferMeter()
        guard let minimumRate else { return try await body(meter) }
        let clock = self.clock
        let service = self.service
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask { try await body(meter) }
            group.addTask {
                var last = meter.total
                while true {
                    try await clock.sleep(for: minimumRate.window)
                    let now = meter.total
                    if now - last < minimumRate.bytes {
                        throw AttachmentError(
                            code: .remoteUnavailable,
                            message: "\(service) \(event.operation) of \(String(reflecting: event.object)) moved "
                                + "\(now - last) bytes in \(minimumRate.window), less than the minimum transfer rate "
                                + "of \(minimumRate.bytes) bytes per \(minimumRate.window); it was stopped to be "
                                + "tried again later", attachmentId: attachmentId, name: event.object)
                    }
                    last = now
                }
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let value = first else { throw CancellationError() }
            return value
        }
    }
}

/// `value` lowercased when it is a SHA-256 in hex (64 hex digits, surrounding spaces ignored), else `nil`.
func validSHA256(_ value: String?) -> String? {
    guard let text = value?.trimmingCharacters(in: .whitespacesAndNewlines), FileStreaming.isSHA256(text) else {
        return nil
    }
    return text.lowercased()
}

/// What an adapter's download of one attachment's object needs from the adapter: how to send a request on
/// the object, and where its stored SHA-256 is.
struct ObjectDownload: Sendable {
    /// Where an adapter keeps the SHA-256 an object was uploaded with, which a download returns for the
    /// queue to check.
    enum StoredSHA256: Sendable {
        /// In a header of the response that serves the object (S3's `x-amz-meta-sha256`).
        case header(String)
        /// Fetched by this closure (the HTTP adapter's companion file) before the object's body.
        case fetched(@Sendable () async throws -> String?)
    }

    /// Sends a request on the object (a `GET`, or the `HEAD` that confirms a resume) with the given headers
    /// (`Range`, conditions), returning the response when `accepts` its status and throwing the classified
    /// error otherwise.
    typealias Request =
        @Sendable (
            _ method: HTTPRequestMethod, _ headers: [(name: String, value: String)],
            _ accepts: @escaping @Sendable (HTTPStatus) -> Bool
        ) async throws -> HTTPEngineResponse

    var attachment: Attachment
    /// The download's event (its `GET`), for messages, the observer and the slow-transfer watchdog.
    var event: RequestEvent
    /// How a large object is split into ranges fetched at once, or `nil`.
    var parallel: ParallelDownloads?
    var storedSHA256: StoredSHA256
    var request: Request
}

/// What a download learned about the object it fetched: its size, and the headers of the response that
/// served it (an adapter reads the stored SHA-256 from them).
struct DownloadedObject: Sendable {
    var size: Int64?
    var headers: HTTPHeaderFields
    /// How many bytes the destination holds and their SHA-256, when the download wrote the whole file and
    /// hashed it on the way (not after a resume).
    var writtenSize: Int64? = nil
    var writtenSHA256: String? = nil
}

/// Counts the bytes a transfer moves, for the slow-transfer watchdog.
final class TransferMeter: Sendable {
    private let count = LockedValue<Int64>(0)

    func add(_ bytes: Int64) {
        count.withLock { $0 += bytes }
    }

    var total: Int64 { count.withLock { $0 } }
}

/// What identifies the object a partial download came from, kept beside it until the download completes.
struct ResumeValidator: Codable, Equatable, Sendable {
    /// A strong `ETag`, when the server sent one.
    var etag: String?
    /// The `Last-Modified` date, as sent, when there is no strong `ETag`.
    var lastModified: String?
    /// The object's size.
    var size: Int64?

    /// The validator of a response, or `nil` when it has neither a strong `ETag` nor a `Last-Modified` date.
    init?(headers: HTTPHeaderFields, size: Int64?) {
        let etag = headers.first(name: "etag").flatMap { $0.hasPrefix("W/") || $0.isEmpty ? nil : $0 }
        let lastModified = etag == nil ? headers.first(name: "last-modified") : nil
        guard etag != nil || lastModified != nil else { return nil }
        self.etag = etag
        self.lastModified = lastModified
        self.size = size
    }

    /// The conditional headers that make a server refuse (412) to serve another version of the object.
    var conditions: [(name: String, value: String)] {
        if let etag { return [("if-match", etag)] }
        if let lastModified { return [("if-unmodified-since", lastModified)] }
        return []
    }

    /// Whether a response's `ETag`, when it has one, is this validator's.
    func matches(_ headers: HTTPHeaderFields) -> Bool {
        guard let etag, let other = headers.first(name: "etag") else { return true }
        return other == etag
    }

    /// The largest validator file read: one is a few hundred bytes.
    static let maximumFileSize = 16 * 1024

    /// The validator kept in the file at `url`, read through `files`; `nil` when there is none, or it is not
    /// one (cut short by a crash, say).
    static func load(from url: URL, files: any FileOperations) -> ResumeValidator? {
        guard let handle = try? files.openForReading(atPath: url.path) else { return nil }
        defer { try? handle.close() }
        guard let data = try? handle.read(upToCount: maximumFileSize) else { return nil }
        return try? JSONDecoder().decode(ResumeValidator.self, from: data)
    }

    /// Writes the validator to the file at `url` through `files` (created or replaced, not flushed: a
    /// validator lost or cut short by a crash reads as none, and the download starts over). A failure only
    /// costs a resume.
    func save(to url: URL, files: any FileOperations) {
        guard let data = try? JSONEncoder().encode(self),
            let output = try? files.openForWriting(atPath: url.path, at: nil)
        else { return }
        defer { output.close() }
        try? output.write(data)
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
