import AttachmentSync
import Foundation
import Logging

/// Remote storage on a plain HTTP server that accepts `PUT`, `GET` and `DELETE` of
/// `{baseURL}/{filename}`: a WebDAV folder (nginx, Apache), a storage gateway, your own backend.
///
/// - The filename is percent-encoded as one path segment; names that a server could resolve to another folder
///   (`.`, `..`, or with `/` or `\`) are rejected with `invalidName`.
/// - ``Configuration/headers`` is called before every request, so a bearer token that expires can be
///   refreshed by your closure.
/// - Files stream both ways in small chunks with progress; downloads resume with a ranged GET
///   (``supportsRangedDownloads`` is `true`; a server that ignores `Range` gets the whole file read again).
/// - `DELETE` of a missing file (404 or 410) succeeds. Failures are `AttachmentError`s:
///   404 is `remoteNotFound`, 401 and 403 `accessDenied`, 408, 429 and 5xx `remoteUnavailable` (with the
///   server's `Retry-After`), connection failures and timeouts `remoteUnavailable`, anything else
///   `remoteFailure`; the underlying error is a ``RemoteHTTPError``. Header values are never logged or put
///   in messages.
///
/// The adapter sends with the ``RemoteTransport`` it is given; call ``shutdown()`` when done with it.
///
/// ```swift
/// let storage = try HTTPRemoteStorage(configuration: .init(
///     baseURL: URL(string: "https://files.example.com/attachments")!,
///     headers: { [("Authorization", "Bearer \(try await session.accessToken())")] }
/// ))
/// ```
public final class HTTPRemoteStorage: RemoteStorageAdapter, DownloadSinkAdapter {
    /// Returns the headers to send with a request (an `Authorization` header, say). Called before every
    /// request; it may throw to fail the request.
    public typealias HeadersProvider = @Sendable () async throws -> [(name: String, value: String)]

    /// Every option of ``HTTPRemoteStorage``, with its default.
    public struct Configuration: Sendable {
        /// The folder URL files go under: a file's URL is this, `/`, and its percent-encoded filename.
        public var baseURL: URL
        /// The headers sent with every request. The default sends none.
        public var headers: HeadersProvider
        /// How long connecting to the server may take. Applies to the client the adapter creates, not to one
        /// you pass in. The default is 10 seconds.
        public var connectTimeout: Duration = .seconds(10)
        /// How long a request may go without sending or receiving a byte before it fails with
        /// `AttachmentError.Code.remoteUnavailable`. Applies to the client the
        /// adapter creates, not to one you pass in. The default is 60 seconds.
        public var requestTimeout: Duration = .seconds(60)
        /// Whether each file's SHA-256 is kept on the server beside it, in a small companion file named
        /// `.attachment-sync-sha256-<filename>` (written before the file, deleted after it), and returned with
        /// every download so the queue checks bytes that any device uploaded. Turn it off for a server that
        /// accepts only the files themselves; downloads are then checked against their size (and against the
        /// hash the queue knows from its own saves or from the watched rows). The default is `true`.
        public var storesContentHashes: Bool = true
        /// Whether uploads are create-only: before each upload the adapter looks for a file under the name
        /// (`HEAD`, then its stored SHA-256); one stored with the same SHA-256 is success without sending the
        /// file again, any other is `AttachmentError.Code.conflict` and is not
        /// replaced. Plain WebDAV servers (nginx) ignore `If-None-Match` on `PUT`, so two devices creating one
        /// name at the same moment can still both write. Needs ``storesContentHashes``; without it uploads
        /// replace. The default is `true`.
        public var createOnly: Bool = true
        /// The slowest an upload or download may move before it is stopped with
        /// `AttachmentError.Code.remoteUnavailable` and left for the queue to try
        /// again, so a server that trickles bytes cannot hold it for ever; `nil` lets transfers take any time.
        /// See ``MinimumTransferRate``. The default is ``MinimumTransferRate/default``: 16 KiB in every 30
        /// seconds.
        public var minimumTransferRate: MinimumTransferRate? = .default
        /// Files at least this large are downloaded as ranges of ``downloadPartSize`` bytes,
        /// ``downloadConcurrency`` at once, each written at its place in the file, when the server accepts
        /// range requests (`Accept-Ranges: bytes`); each range is conditional on the first response's `ETag`
        /// (or `Last-Modified` date), so all come from one version of the file. `nil` downloads every file with
        /// one streamed `GET`. The default is 32 MiB.
        public var parallelDownloadThreshold: Int64? = 32 * 1024 * 1024
        /// The size of each range of a split download, at least 64 KiB. The default is 8 MiB.
        public var downloadPartSize: Int64 = 8 * 1024 * 1024
        /// How many ranges of one file are downloaded at once, at least 1. The default is 4.
        public var downloadConcurrency: Int = 4
        /// The clock ``minimumTransferRate`` is measured with (tests pass a manual one). The default is a
        /// `ContinuousClock`.
        public var clock: any Clock<Duration> = ContinuousClock()
        /// The current date, which a `Retry-After` given as an HTTP date is counted from: the wait the queue
        /// honours before it tries again is that date minus this one (tests pass their own; an app whose
        /// device clock is off can pass the server's time). The default is `Date()`.
        public var now: @Sendable () -> Date = { Date() }
        /// Where the adapter logs requests and failures, at debug level; never header values or file contents.
        /// The default discards everything.
        public var logger: Logger = Logger(label: "AttachmentSyncS3.HTTPRemoteStorage") { _ in
            SwiftLogNoOpLogHandler()
        }

        /// Sees every request before it is sent (tests count and fail requests with it).
        var requestObserver: RequestObserver?
        /// The file layer uploads are read and downloads written through (tests pass their own).
        var files: any FileOperations = SystemFileOperations()

        /// Creates a configuration.
        ///
        /// - Parameters:
        ///   - baseURL: The folder URL files go under.
        ///   - headers: The headers sent with every request, fetched anew each time. The default sends none.
        public init(baseURL: URL, headers: @escaping HeadersProvider = { [] }) {
            self.baseURL = baseURL
            self.headers = headers
        }

        func validate() throws {
            func fail(_ name: String, _ reason: String) -> AttachmentError {
                AttachmentError(code: .invalidConfiguration, message: "\(name) \(reason)", name: name)
            }
            guard HTTPURL.isServer(baseURL) else {
                throw fail("baseURL", "must be an http or https URL with a host, not \(baseURL)")
            }
            guard baseURL.query == nil, baseURL.fragment == nil else {
                throw fail("baseURL", "must have no query or fragment")
            }
            guard connectTimeout > .zero else {
                throw fail("connectTimeout", "must be positive, not \(connectTimeout)")
            }
            guard requestTimeout > .zero else {
                throw fail("requestTimeout", "must be positive, not \(requestTimeout)")
            }
            if let parallelDownloadThreshold, parallelDownloadThreshold < 1 {
                throw fail("parallelDownloadThreshold", "must be positive or nil, not \(parallelDownloadThreshold)")
            }
            guard downloadPartSize >= 64 * 1024 else {
                throw fail("downloadPartSize", "must be at least 64 KiB (65536 bytes), not \(downloadPartSize)")
            }
            guard downloadConcurrency >= 1 else {
                throw fail("downloadConcurrency", "must be at least 1, not \(downloadConcurrency)")
            }
            try minimumTransferRate?.validate(as: "minimumTransferRate")
        }

        /// How large downloads are split, or `nil`.
        var parallelDownloads: ParallelDownloads? {
            parallelDownloadThreshold.map {
                ParallelDownloads(threshold: $0, partSize: downloadPartSize, concurrency: downloadConcurrency)
            }
        }
    }

    /// The options this adapter was created with.
    public let configuration: Configuration
    let transport: HTTPTransport
    /// Whether ``shutdown()`` has run.
    private let isShutDown = LockedValue(false)

    /// Creates an adapter.
    ///
    /// - Parameters:
    ///   - configuration: The base URL, headers and options.
    ///   - transport: The HTTP client library to send with (see ``RemoteTransport``), with the configured
    ///     timeouts.
    /// - Throws: `AttachmentError` with code `invalidConfiguration` for a base URL that is
    ///   not http(s) or has a query, or a timeout that is not positive.
    public convenience init(configuration: Configuration, transport: RemoteTransport) throws {
        try self.init(
            configuration: configuration,
            engine: { transport.makeEngine(configuration.connectTimeout, configuration.requestTimeout) })
    }

    /// Creates an adapter that sends through the engine `makeEngine` makes once the configuration is valid.
    package init(configuration: Configuration, engine makeEngine: () -> any HTTPEngine) throws {
        try configuration.validate()
        let engine = makeEngine()
        self.configuration = configuration
        self.transport = HTTPTransport(
            engine: engine, service: "HTTP", logger: configuration.logger, observer: configuration.requestObserver,
            minimumRate: configuration.minimumTransferRate, clock: configuration.clock, files: configuration.files,
            now: configuration.now)
    }

    /// Shuts down the HTTP client the adapter created (a client you passed in is left alone). Call it once you
    /// are done with the adapter; calling it again does nothing.
    public func shutdown() async throws {
        let wasRunning = isShutDown.withLock { done -> Bool in
            defer { done = true }
            return !done
        }
        guard wasRunning else { return }
        try await transport.engine.shutdown()
    }

    /// An adapter dropped without ``shutdown()`` still shuts the client it created down (in the background:
    /// the client keeps itself alive until it has), rather than leave AsyncHTTPClient to trap on a client
    /// that was never shut down.
    deinit {
        if !isShutDown.withLock({ $0 }) {
            transport.engine.shutdownInBackground()
        }
    }

    /// The URL of the attachment's file: the base URL, `/`, and the filename percent-encoded as one segment.
    ///
    /// - Throws: `invalidName` for a filename that is empty, `.` or `..`, or contains `/` or `\`: servers decode
    ///   `%2F` and resolve `..`, so such a name could reach another folder; also for one starting with
    ///   ``contentHashPrefix`` (another file's stored hash) when ``Configuration/storesContentHashes``.
    public func url(for attachment: Attachment) throws -> URL {
        if configuration.storesContentHashes, attachment.filename.hasPrefix(Self.contentHashPrefix) {
            throw AttachmentError(
                code: .invalidName,
                message: "\(String(reflecting: attachment.filename)) cannot be an attachment's file name: the "
                    + "\(Self.contentHashPrefix) prefix is where the adapter keeps stored hashes",
                attachmentId: attachment.id, name: attachment.filename)
        }
        return try url(named: attachment.filename, attachment: attachment)
    }

    /// The prefix of the companion file that keeps a file's SHA-256 (see
    /// ``Configuration/storesContentHashes``).
    public static let contentHashPrefix = ".attachment-sync-sha256-"

    func url(named filename: String, attachment: Attachment) throws -> URL {
        guard !filename.isEmpty, filename != ".", filename != "..", !filename.contains("/"), !filename.contains("\\")
        else {
            throw AttachmentError(
                code: .invalidName,
                message: "\(String(reflecting: filename)) cannot be a file name on an HTTP server: it is empty, `.`, "
                    + "`..` or contains `/` or `\\`", attachmentId: attachment.id, name: filename)
        }
        var base = configuration.baseURL.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        let text = base + "/" + SigV4Signer.uriEncode(filename)
        guard let url = URL(string: text) else {
            throw AttachmentError(
                code: .invalidName, message: "cannot form a URL for \(String(reflecting: filename))",
                attachmentId: attachment.id, name: filename)
        }
        return url
    }

    // MARK: - RemoteStorageAdapter

    /// Uploads `data` with one `PUT` (after its SHA-256, when ``Configuration/storesContentHashes``).
    ///
    /// - Throws: `integrityMismatch` when the attachment's `Attachment.contentHash` says its
    ///   content is other bytes.
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        _ = try url(for: attachment)
        let sha256 = PayloadDigests.of(data, md5: false).sha256
        try S3RemoteStorage.checkContent(sha256, of: attachment, key: attachment.filename)
        if try await isUploaded(sha256, attachment) { return }
        try await BandwidthThrottle.current?.take(data.count)
        try await storeContentHash(sha256, of: attachment)
        var request = try await request(.put, attachment: attachment)
        if let mediaType = attachment.mediaType, !mediaType.isEmpty {
            request.headers.replaceOrAdd(name: "content-type", value: mediaType)
        }
        request.body = .bytes(data)
        let event = event("PUT", attachment)
        let response = try await transport.send(request, event: event, attachmentId: attachment.id)
        _ = try await transport.collect(response, event: event, attachmentId: attachment.id, upTo: 1 << 20)
    }

    /// Downloads the file into memory; throws `remoteNotFound` on 404.
    ///
    /// Files larger than 1 GiB fail with `unsupported`: use the streaming
    /// ``downloadFile(attachment:into:from:progress:)``, which the queue always calls.
    public func downloadFile(attachment: Attachment) async throws -> Data {
        let request = try await request(.get, attachment: attachment)
        let event = event("GET", attachment)
        let response = try await transport.send(request, event: event, attachmentId: attachment.id) { $0 == .ok }
        return try await transport.collectObject(response, event: event, attachmentId: attachment.id)
    }

    /// Deletes the file, then its stored SHA-256; a 404 or 410 is success.
    public func deleteFile(attachment: Attachment) async throws {
        try await delete(try url(for: attachment), attachment: attachment)
        if configuration.storesContentHashes {
            try await delete(
                try url(named: Self.contentHashPrefix + attachment.filename, attachment: attachment),
                attachment: attachment)
        }
    }

    /// Uploads the file with one `PUT`, streaming it in chunks (after the attachment's SHA-256, when
    /// ``Configuration/storesContentHashes``: its `Attachment.contentHash`, or the file's
    /// when it has none); progress counts bytes handed to the network.
    public func uploadFile(
        fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        let files = transport.files
        let size = try files.size(ofFileAt: fileURL.path)
        var sha256: String?
        if configuration.storesContentHashes {
            sha256 = validSHA256(attachment.contentHash)
            if sha256 == nil {
                sha256 = try await PayloadDigests.sha256(ofFileAt: fileURL, offset: 0, length: size, files: files)
            }
        }
        if let sha256, try await isUploaded(sha256, attachment) {
            progress(TransferProgress(completedBytes: size, totalBytes: size))
            return
        }
        var request = try await request(.put, attachment: attachment)
        if let mediaType = attachment.mediaType, !mediaType.isEmpty {
            request.headers.replaceOrAdd(name: "content-type", value: mediaType)
        }
        let event = event("PUT", attachment)
        // The stored hash too is under the minimum rate: a server that trickles its answer to that small
        // request must not hold the transfer either.
        try await transport.watched(event, attachmentId: attachment.id) { [request, sha256] meter in
            if let sha256 { try await self.storeContentHash(sha256, of: attachment) }
            var request = request
            let sent = UploadProgress(totalBytes: size, progress: progress)
            request.body = .file(
                HTTPFileBody(url: fileURL, offset: 0, length: size, files: files) { count in
                    meter.add(Int64(count))
                    sent.add(count)
                })
            let response = try await self.transport.send(request, event: event, attachmentId: attachment.id)
            _ = try await self.transport.collect(response, event: event, attachmentId: attachment.id, upTo: 1 << 20)
        }
    }

    /// Downloads the file into `destination` (created or replaced), streaming it. On failure the bytes
    /// received so far stay in `destination`, so the download can resume with
    /// ``downloadFile(attachment:into:from:progress:)``.
    public func downloadFile(
        attachment: Attachment, to destination: URL, progress: @escaping TransferProgressHandler
    ) async throws {
        _ = try await downloadFile(attachment: attachment, into: destination, from: 0, progress: progress)
    }

    /// `true`: downloads resume with a ranged GET.
    public var supportsRangedDownloads: Bool { true }

    /// Appends the file's bytes from `offset` on to `destination` with a ranged GET, streaming; progress counts
    /// the whole file. `destination` must hold at least `offset` bytes (anything past `offset` is cut). Prefer
    /// ``downloadFile(attachment:into:from:progress:)``, which also makes sure the file did not change since
    /// those bytes were fetched.
    public func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        _ = try await transport.downloadObject(
            objectDownload(attachment), into: destination, from: offset, requiresValidator: false, progress: progress)
    }

    /// Downloads the file into `destination`, streaming, and returns its size and (when
    /// ``Configuration/storesContentHashes``) the SHA-256 stored beside it, for the queue to check the bytes
    /// against; a download from byte 0 also returns the SHA-256 of the bytes it wrote, hashed on the way.
    /// `destination` is not flushed to stable storage (the queue does that before it relies on the file).
    ///
    /// From an `offset` above 0, the rest is fetched with a ranged GET conditional on the file's `ETag` (or
    /// `Last-Modified` date), kept beside `destination` since the first bytes came: when the file changed
    /// meanwhile, or nothing proves it did not, the download starts over from byte 0 instead of splicing two
    /// versions. A file whose size is not the attachment's known `Attachment.size` is refused
    /// with `integrityMismatch` before its body is read.
    public func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        try await transport.downloadObject(
            objectDownload(attachment), into: destination, from: offset, requiresValidator: true, progress: progress)
    }

    /// How the attachment's file is downloaded: `GET` and `HEAD` of its URL with the provider's headers, its
    /// SHA-256 from the companion file (when ``Configuration/storesContentHashes``).
    private func objectDownload(_ attachment: Attachment) -> ObjectDownload {
        let storedSHA256 = ObjectDownload.StoredSHA256.fetched {
            self.configuration.storesContentHashes ? try await self.storedContentHash(of: attachment) : nil
        }
        return ObjectDownload(
            attachment: attachment, event: event("GET", attachment), parallel: configuration.parallelDownloads,
            storedSHA256: storedSHA256
        ) { method, headers, accepts in
            var request = try await self.request(method, attachment: attachment)
            for (name, value) in headers { request.headers.replaceOrAdd(name: name, value: value) }
            return try await self.transport.send(
                request, event: self.event(method.rawValue, attachment), attachmentId: attachment.id, accepts: accepts)
        }
    }

    // MARK: - Stored hashes

    /// Create-only (see ``Configuration/createOnly``): `true` when the server has the file stored with
    /// `sha256` already, `false` when it has no file under the name; throws `conflict` for another file.
    private func isUploaded(_ sha256: String, _ attachment: Attachment) async throws -> Bool {
        guard configuration.createOnly, configuration.storesContentHashes,
            let existing = try await fileInfo(attachment: attachment)
        else { return false }
        if existing.sha256 == sha256.lowercased() { return true }
        throw AttachmentError(
            code: .conflict,
            message: "the server holds other content as \(String(reflecting: attachment.filename)) (SHA-256 "
                + "\(existing.sha256 ?? "not stored"), not \(sha256)); nothing was replaced",
            attachmentId: attachment.id, name: attachment.filename)
    }

    /// Writes the companion file that keeps the attachment's SHA-256, before the file itself: a file is
    /// never on the server without it (a crash in between leaves only the small companion, overwritten by the
    /// next try or deleted with the attachment).
    private func storeContentHash(_ sha256: String, of attachment: Attachment) async throws {
        guard configuration.storesContentHashes else { return }
        _ = try url(for: attachment)  // the file's own name first: `.` is no name for it, whatever the prefix
        let url = try url(named: Self.contentHashPrefix + attachment.filename, attachment: attachment)
        var request = try await request(.put, url: url, attachment: attachment)
        request.headers.replaceOrAdd(name: "content-type", value: "text/plain")
        request.body = .bytes(Data(sha256.utf8))
        let event = event("PUT", attachment, object: Self.contentHashPrefix + attachment.filename)
        let response = try await transport.send(request, event: event, attachmentId: attachment.id)
        _ = try await transport.collect(response, event: event, attachmentId: attachment.id, upTo: 1 << 20)
    }

    /// The SHA-256 kept beside the attachment's file, or `nil` when there is none (or it is not a SHA-256).
    func storedContentHash(of attachment: Attachment) async throws -> String? {
        _ = try url(for: attachment)
        let name = Self.contentHashPrefix + attachment.filename
        let request = try await request(.get, url: try url(named: name, attachment: attachment), attachment: attachment)
        let event = event("GET", attachment, object: name)
        let response = try await transport.send(request, event: event, attachmentId: attachment.id) {
            $0 == .ok || $0 == .notFound || $0 == .gone
        }
        let body = try await transport.collect(response, event: event, attachmentId: attachment.id, upTo: 4096)
        guard response.status == .ok else { return nil }
        return validSHA256(String(decoding: body, as: UTF8.self))
    }

    private func delete(_ url: URL, attachment: Attachment) async throws {
        let request = try await request(.delete, url: url, attachment: attachment)
        let event = event("DELETE", attachment, object: url.lastPathComponent)
        let response = try await transport.send(request, event: event, attachmentId: attachment.id) {
            (200..<300).contains($0.code) || $0 == .notFound || $0 == .gone
        }
        _ = try? await response.body.collect(upTo: HTTPTransport.maxErrorBody)
    }

    // MARK: - Requests

    func event(_ method: String, _ attachment: Attachment, object: String? = nil) -> RequestEvent {
        RequestEvent(operation: method, method: method, object: object ?? attachment.filename)
    }

    /// A request for the attachment's URL with the provider's headers.
    private func request(_ method: HTTPRequestMethod, attachment: Attachment) async throws -> HTTPEngineRequest {
        try await request(method, url: try url(for: attachment), attachment: attachment)
    }

    /// A request for `url` with the provider's headers.
    func request(_ method: HTTPRequestMethod, url: URL, attachment: Attachment) async throws -> HTTPEngineRequest {
        try await request(method, url: url, attachmentId: attachment.id, name: attachment.filename)
    }

    /// A request for `url` with the provider's headers; the id and name go into a failing provider's error.
    func request(
        _ method: HTTPRequestMethod, url: URL, attachmentId: String?, name: String?
    ) async throws -> HTTPEngineRequest {
        let headers: [(name: String, value: String)]
        do {
            headers = try await configuration.headers()
        } catch let error as AttachmentError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw AttachmentError(
                code: .accessDenied, message: "the HTTP headers provider failed", attachmentId: attachmentId,
                name: name, underlying: error)
        }
        return HTTPEngineRequest(method: method, url: url.absoluteString, headers: HTTPHeaderFields(headers))
    }
}
