import AsyncHTTPClient
import AttachmentSync
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Remote storage on a plain HTTP server that accepts `PUT`, `GET` and `DELETE` of
/// `{baseURL}/{filename}`: a WebDAV folder (nginx, Apache), a storage gateway, your own backend.
///
/// - The filename is percent-encoded as one path segment; names that a server could resolve to another folder
///   (`.`, `..`, or with `/` or `\`) are rejected with `invalidName`.
/// - ``Configuration/headers`` is called before every request, so a bearer token that expires can be
///   refreshed by your closure.
/// - Files stream both ways in small chunks with progress; downloads resume with a ranged GET
///   (``supportsRangedDownloads`` is `true`; a server that ignores `Range` gets the whole file read again).
/// - `DELETE` of a missing file (404 or 410) succeeds. Failures are ``AttachmentSync/AttachmentError``s:
///   404 is `remoteNotFound`, 401 and 403 `accessDenied`, 408, 429 and 5xx `remoteUnavailable` (with the
///   server's `Retry-After`), connection failures and timeouts `remoteUnavailable`, anything else
///   `remoteFailure`; the underlying error is a ``RemoteHTTPError``. Header values are never logged or put
///   in messages.
///
/// The adapter creates an `HTTPClient` unless you pass one; call ``shutdown()`` when done with it.
///
/// ```swift
/// let storage = try HTTPRemoteStorage(configuration: .init(
///     baseURL: URL(string: "https://files.example.com/attachments")!,
///     headers: { [("Authorization", "Bearer \(try await session.accessToken())")] }
/// ))
/// ```
public final class HTTPRemoteStorage: RemoteStorageAdapter {
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
        /// ``AttachmentSync/AttachmentError/Code-swift.struct/remoteUnavailable``. Applies to the client the
        /// adapter creates, not to one you pass in. The default is 60 seconds.
        public var requestTimeout: Duration = .seconds(60)
        /// Where the adapter logs requests and failures, at debug level; never header values or file contents.
        /// The default discards everything.
        public var logger: Logger = Logger(label: "AttachmentSyncS3.HTTPRemoteStorage") { _ in
            SwiftLogNoOpLogHandler()
        }

        /// Sees every request before it is sent (tests count and fail requests with it).
        var requestObserver: RequestObserver?

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
            guard let scheme = baseURL.scheme?.lowercased(), scheme == "http" || scheme == "https",
                let host = baseURL.host, !host.isEmpty
            else {
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
        }
    }

    /// The options this adapter was created with.
    public let configuration: Configuration
    let transport: HTTPTransport
    private let ownsClient: LockedValue<Bool>

    /// Creates an adapter.
    ///
    /// - Parameters:
    ///   - configuration: The base URL, headers and options.
    ///   - httpClient: The client to send requests with, which stays yours to shut down, or `nil` to have the
    ///     adapter create one (redirects off, the configured timeouts) that ``shutdown()`` shuts down. The
    ///     default is `nil`.
    /// - Throws: ``AttachmentSync/AttachmentError`` with code `invalidConfiguration` for a base URL that is
    ///   not http(s) or has a query, or a timeout that is not positive.
    public init(configuration: Configuration, httpClient: HTTPClient? = nil) throws {
        try configuration.validate()
        self.configuration = configuration
        let client =
            httpClient
            ?? HTTPTransport.makeClient(
                connectTimeout: configuration.connectTimeout, requestTimeout: configuration.requestTimeout)
        self.transport = HTTPTransport(
            client: client, service: "HTTP", logger: configuration.logger, observer: configuration.requestObserver)
        self.ownsClient = LockedValue(httpClient == nil)
    }

    /// Shuts down the HTTP client the adapter created (a client you passed in is left alone). Call it once you
    /// are done with the adapter; calling it again does nothing.
    public func shutdown() async throws {
        let shouldShutDown = ownsClient.withLock { owns -> Bool in
            defer { owns = false }
            return owns
        }
        if shouldShutDown {
            try await transport.client.shutdown()
        }
    }

    /// The URL of the attachment's file: the base URL, `/`, and the filename percent-encoded as one segment.
    ///
    /// - Throws: `invalidName` for a filename that is empty, `.` or `..`, or contains `/` or `\`: servers decode
    ///   `%2F` and resolve `..`, so such a name could reach another folder.
    public func url(for attachment: Attachment) throws -> URL {
        let filename = attachment.filename
        guard !filename.isEmpty, filename != ".", filename != "..", !filename.contains("/"), !filename.contains("\\")
        else {
            throw AttachmentError(
                code: .invalidName,
                message: "\(String(reflecting: filename)) cannot be a file name on an HTTP server: it is empty, `.`, "
                    + "`..` or contains `/` or `\\`", attachmentId: attachment.id, name: filename)
        }
        var base = configuration.baseURL.absoluteString
        while base.hasSuffix("/") { base.removeLast() }
        let text = base + "/" + SigV4Signer.uriEncode(attachment.filename)
        guard let url = URL(string: text) else {
            throw AttachmentError(
                code: .invalidName, message: "cannot form a URL for \(String(reflecting: attachment.filename))",
                attachmentId: attachment.id, name: attachment.filename)
        }
        return url
    }

    // MARK: - RemoteStorageAdapter

    /// Uploads `data` with one `PUT`.
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        var request = try await request(.PUT, attachment: attachment)
        if let mediaType = attachment.mediaType, !mediaType.isEmpty {
            request.headers.replaceOrAdd(name: "content-type", value: mediaType)
        }
        request.body = .bytes(ByteBuffer(bytes: data))
        let event = event("PUT", attachment)
        let response = try await transport.send(request, event: event, attachmentId: attachment.id)
        _ = try await transport.collect(response, event: event, attachmentId: attachment.id, upTo: 1 << 20)
    }

    /// Downloads the file into memory; throws `remoteNotFound` on 404.
    public func downloadFile(attachment: Attachment) async throws -> Data {
        let request = try await request(.GET, attachment: attachment)
        let event = event("GET", attachment)
        let response = try await transport.send(request, event: event, attachmentId: attachment.id) { $0 == .ok }
        return Data(
            try await transport.collect(response, event: event, attachmentId: attachment.id, upTo: .max)
                .readableBytesView)
    }

    /// Deletes the file; a 404 or 410 is success.
    public func deleteFile(attachment: Attachment) async throws {
        let request = try await request(.DELETE, attachment: attachment)
        let event = event("DELETE", attachment)
        let response = try await transport.send(request, event: event, attachmentId: attachment.id) {
            (200..<300).contains($0.code) || $0 == .notFound || $0 == .gone
        }
        _ = try? await response.body.collect(upTo: HTTPTransport.maxErrorBody)
    }

    /// Uploads the file with one `PUT`, streaming it in chunks; progress counts bytes handed to the network.
    public func uploadFile(
        fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        let size = try FileIO.size(of: fileURL)
        var request = try await request(.PUT, attachment: attachment)
        if let mediaType = attachment.mediaType, !mediaType.isEmpty {
            request.headers.replaceOrAdd(name: "content-type", value: mediaType)
        }
        let sent = LockedValue<Int64>(0)
        let chunks = FileChunks(url: fileURL, offset: 0, length: size) { count in
            let total = sent.withLock { sent -> Int64 in
                sent += Int64(count)
                return sent
            }
            progress(TransferProgress(completedBytes: total, totalBytes: size))
        }
        request.body = .stream(chunks, length: .known(size))
        progress(TransferProgress(completedBytes: 0, totalBytes: size))
        let event = event("PUT", attachment)
        let response = try await transport.send(request, event: event, attachmentId: attachment.id)
        _ = try await transport.collect(response, event: event, attachmentId: attachment.id, upTo: 1 << 20)
    }

    /// Downloads the file into `destination` (created or replaced), streaming it. On failure the bytes
    /// received so far stay in `destination`, so the download can resume with
    /// ``downloadFile(attachment:appendingTo:from:progress:)``.
    public func downloadFile(
        attachment: Attachment, to destination: URL, progress: @escaping TransferProgressHandler
    ) async throws {
        try await downloadFile(attachment: attachment, appendingTo: destination, from: 0, progress: progress)
    }

    /// `true`: downloads resume with a ranged GET.
    public var supportsRangedDownloads: Bool { true }

    /// Appends the file's bytes from `offset` on to `destination` with a ranged GET, streaming; progress counts
    /// the whole file. `destination` must hold at least `offset` bytes (anything past `offset` is cut).
    public func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        let event = event("GET", attachment)
        try await transport.download(
            to: destination, from: max(0, offset), event: event, attachmentId: attachment.id, progress: progress
        ) { range, accepts in
            var request = try await request(.GET, attachment: attachment)
            if let range {
                request.headers.replaceOrAdd(name: "range", value: range)
            }
            return try await transport.send(request, event: event, attachmentId: attachment.id, accepts: accepts)
        }
    }

    // MARK: - Requests

    private func event(_ method: String, _ attachment: Attachment) -> RequestEvent {
        RequestEvent(operation: method, method: method, object: attachment.filename)
    }

    /// A request for the attachment's URL with the provider's headers.
    private func request(_ method: HTTPMethod, attachment: Attachment) async throws -> HTTPClientRequest {
        let url = try url(for: attachment)
        let headers: [(name: String, value: String)]
        do {
            headers = try await configuration.headers()
        } catch let error as AttachmentError {
            throw error
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            throw AttachmentError(
                code: .accessDenied, message: "the HTTP headers provider failed", attachmentId: attachment.id,
                name: attachment.filename, underlying: error)
        }
        var request = HTTPClientRequest(url: url.absoluteString)
        request.method = method
        for (name, value) in headers {
            request.headers.add(name: name, value: value)
        }
        return request
    }
}
