import AsyncHTTPClient
import AttachmentSync
import Foundation
import Logging
import NIOCore
import NIOHTTP1

/// Remote storage in an S3-compatible object store: AWS S3, Ceph, MinIO, Cloudflare R2, Supabase Storage's S3
/// API. Each attachment is the object ``Configuration/keyPrefix`` + `Attachment.filename`.
///
/// - Every request is signed with AWS Signature Version 4 (``SigV4Signer``), its body's SHA-256 included, and
///   uploads carry `Content-MD5`, so the server rejects a body that changed on the way.
/// - Files stream both ways in small chunks with progress: a file of any size moves with bounded memory.
/// - Files above ``Configuration/multipartThreshold`` are uploaded in parts, several at once; the upload id
///   and completed parts are kept in ``Configuration/stateDirectory`` so an upload interrupted by a crash, a
///   restart or a network failure continues with the missing parts. An upload that fails for good is
///   aborted; ``abortStaleMultipartUploads(olderThan:)`` cleans up the ones left behind.
/// - Downloads resume from an offset with a ranged GET (``supportsRangedDownloads`` is `true`).
/// - Deleting a missing object succeeds. Failures are `AttachmentError`s with the code that
///   says what to do: `remoteNotFound`, `accessDenied`, `remoteUnavailable` (with the server's `Retry-After`),
///   `integrityMismatch` or `remoteFailure`, and a ``RemoteHTTPError`` as the underlying error. No message
///   or log line ever contains a secret.
///
/// The adapter creates an `HTTPClient` unless you pass one; call ``shutdown()`` when done with it (an
/// adapter released without it shuts its client down in the background).
///
/// ```swift
/// let storage = try S3RemoteStorage(configuration: .init(
///     endpoint: URL(string: "https://s3.eu-west-1.amazonaws.com")!,
///     region: "eu-west-1",
///     bucket: "my-app-attachments",
///     credentials: .custom { try await backend.temporaryS3Credentials() }
/// ))
/// let queue = AttachmentQueue(db: db, attachmentsDirectory: dir, remoteStorage: storage, watchAttachments: …)
/// // …
/// try await storage.shutdown()
/// ```
public final class S3RemoteStorage: RemoteStorageAdapter {
    /// The methods a presigned URL can be made for.
    public enum PresignedMethod: String, Sendable, Hashable {
        /// Download the object.
        case get = "GET"
        /// Upload (create or replace) the object, with any body.
        case put = "PUT"
    }

    /// The options this adapter was created with.
    public let configuration: Configuration
    let transport: HTTPTransport
    let signer: SigV4Signer
    let credentialsCache: CredentialsCache
    let uploadStore: MultipartUploadStore
    /// Where requests get their presigned URLs when the adapter works for ``PresignedRemoteStorage``
    /// (which signs nothing itself); `nil` when requests are signed with ``Configuration/credentials``.
    let presigned: PresignedAuthorizations?
    /// Whether ``shutdown()`` shuts the client down (the adapter created it), and whether it has.
    private let ownedClientState: LockedValue<OwnedClient>

    private enum OwnedClient {
        case notOwned
        case running
        case shutDown
    }

    /// Creates an adapter.
    ///
    /// - Parameters:
    ///   - configuration: The server, bucket, credentials and options.
    ///   - httpClient: The client to send requests with, which stays yours to shut down, or `nil` to have the
    ///     adapter create one (with redirects off, the configured timeouts and up to 16 connections to the
    ///     server) that ``shutdown()`` shuts down. The default is `nil`.
    /// - Throws: `AttachmentError` with code `invalidConfiguration` naming the first option out
    ///   of range (a part size under 5 MiB, say).
    public convenience init(configuration: Configuration, httpClient: HTTPClient? = nil) throws {
        try self.init(configuration: configuration, httpClient: httpClient, presigned: nil)
    }

    /// Creates an adapter that signs its requests itself (`presigned` is `nil`) or sends each to the URL
    /// `presigned` gets for it.
    init(configuration: Configuration, httpClient: HTTPClient?, presigned: PresignedAuthorizations?) throws {
        try configuration.validate()
        self.presigned = presigned
        self.configuration = configuration
        let client =
            httpClient
            ?? HTTPTransport.makeClient(
                connectTimeout: configuration.connectTimeout, requestTimeout: configuration.requestTimeout)
        self.transport = HTTPTransport(
            client: client, service: "S3", logger: configuration.logger, observer: configuration.requestObserver,
            minimumRate: configuration.minimumTransferRate, clock: configuration.clock)
        self.ownedClientState = LockedValue(httpClient == nil ? .running : .notOwned)
        self.signer = SigV4Signer(region: configuration.region)
        self.credentialsCache = CredentialsCache(
            provider: configuration.credentials, refreshMargin: configuration.credentialsRefreshMargin)
        self.uploadStore = MultipartUploadStore(directory: configuration.stateDirectory)
    }

    /// Shuts down the HTTP client the adapter created (a client you passed in is left alone). Call it once you
    /// are done with the adapter; calling it again does nothing.
    public func shutdown() async throws {
        let shouldShutDown = ownedClientState.withLock { state -> Bool in
            guard case .running = state else { return false }
            state = .shutDown
            return true
        }
        if shouldShutDown {
            try await transport.client.shutdown()
        }
    }

    /// An adapter dropped without ``shutdown()`` still shuts the client it created down (in the background:
    /// the client keeps itself alive until it has), rather than leave AsyncHTTPClient to trap on a client
    /// that was never shut down.
    deinit {
        let running = ownedClientState.withLock { state -> Bool in
            guard case .running = state else { return false }
            return true
        }
        if running {
            transport.client.shutdown { _ in }
        }
    }

    // MARK: - RemoteStorageAdapter

    /// Uploads `data` as the attachment's object in one request, with its MD5 and SHA-256 for the server to
    /// check, and its SHA-256 stored with the object (`x-amz-meta-sha256`) for every later download to check.
    ///
    /// - Throws: `integrityMismatch` when the attachment's `Attachment.contentHash` says its
    ///   content is other bytes.
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        let key = try objectKey(for: attachment)
        let digests = PayloadDigests.of(data)
        try Self.checkContent(digests.sha256, of: attachment, key: key)
        try await BandwidthThrottle.current?.take(data.count)
        let request = S3Request(
            method: .PUT, key: key, headers: uploadHeaders(attachment, md5: digests.md5, sha256: digests.sha256),
            body: .data(data), payload: .sha256(digests.sha256), operation: "PutObject")
        try await putObject(request, sha256: digests.sha256, attachment: attachment)
    }

    /// Downloads the attachment's object into memory; throws `remoteNotFound` when there is none.
    ///
    /// Objects larger than `HTTPTransport.maximumInMemoryDownload` (1 GiB) fail with `unsupported`: use the
    /// streaming ``downloadFile(attachment:into:from:progress:)``, which the queue always calls.
    public func downloadFile(attachment: Attachment) async throws -> Data {
        let key = try objectKey(for: attachment)
        let request = S3Request(method: .GET, key: key, operation: "GetObject")
        let response = try await send(request, attachmentId: attachment.id) { $0 == .ok }
        return try await transport.collectObject(response, event: request.event, attachmentId: attachment.id)
    }

    /// Deletes the attachment's object; succeeds when there is none.
    public func deleteFile(attachment: Attachment) async throws {
        let key = try objectKey(for: attachment)
        let request = S3Request(method: .DELETE, key: key, operation: "DeleteObject")
        let response = try await send(request, attachmentId: attachment.id, accepts: { _ in true })
        let body = try await transport.collect(
            response, event: request.event, attachmentId: attachment.id, upTo: HTTPTransport.maxErrorBody)
        guard (200..<300).contains(response.status.code) else {
            let error = HTTPErrorClassification.error(
                status: response.status, headers: response.headers, body: body, service: "S3",
                operation: "DeleteObject", object: key, attachmentId: attachment.id)
            if error.code == .remoteNotFound { return }
            throw error
        }
    }

    /// Uploads the file, streaming it: in one request up to ``Configuration/multipartThreshold``, in parts
    /// above it (resumable, see ``S3RemoteStorage``). The attachment's SHA-256 is stored with the object
    /// (`x-amz-meta-sha256`): for a single request the file's own, checked against
    /// `Attachment.contentHash`; for a multipart upload its `contentHash`. Progress counts bytes
    /// handed to the network.
    ///
    /// - Throws: `integrityMismatch` when the file is not the content its `contentHash` says.
    public func uploadFile(
        fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        let key = try objectKey(for: attachment)
        let size = try SystemFileOperations().size(ofFileAt: fileURL.path)
        if size > configuration.multipartThreshold {
            try await uploadMultipart(
                fileURL: fileURL, size: size, key: key, attachment: attachment, progress: progress)
            return
        }
        let digests = try await PayloadDigests.of(fileAt: fileURL, offset: 0, length: size)
        try Self.checkContent(digests.sha256, of: attachment, key: key)
        let event = RequestEvent(operation: "PutObject", method: "PUT", object: key)
        try await transport.watched(event, attachmentId: attachment.id) { meter in
            let sent = LockedValue<Int64>(0)
            progress(TransferProgress(completedBytes: 0, totalBytes: size))
            let body = S3Request.Body.file(fileURL, offset: 0, length: size) { count in
                meter.add(Int64(count))
                let total = sent.withLock { sent -> Int64 in
                    sent += Int64(count)
                    return sent
                }
                progress(TransferProgress(completedBytes: total, totalBytes: size))
            }
            let request = S3Request(
                method: .PUT, key: key,
                headers: self.uploadHeaders(attachment, md5: digests.md5, sha256: digests.sha256), body: body,
                payload: .sha256(digests.sha256), operation: "PutObject")
            try await self.putObject(request, sha256: digests.sha256, attachment: attachment)
        }
    }

    /// Sends a `PutObject`, create-only when ``Configuration/createOnly``: a 412 means an object is there,
    /// which is success when it was stored with `sha256` and a conflict otherwise.
    private func putObject(_ request: S3Request, sha256: String, attachment: Attachment) async throws {
        var request = request
        if configuration.createOnly { request.headers.append(("if-none-match", "*")) }
        let response = try await send(request, attachmentId: attachment.id) {
            (200..<300).contains($0.code) || $0 == .preconditionFailed
        }
        _ = try await transport.collect(response, event: request.event, attachmentId: attachment.id, upTo: 1 << 20)
        if response.status == .preconditionFailed {
            try await settleExistingObject(sha256: sha256, attachment: attachment)
        }
    }

    /// An object is under the attachment's key although it was to be created: success when it was stored
    /// with `sha256`; `AttachmentError.Code.conflict` when with another hash
    /// or none; `remoteUnavailable` (to try again) when it is gone again.
    func settleExistingObject(sha256: String, attachment: Attachment) async throws {
        let key = try objectKey(for: attachment)
        guard let existing = try await fileInfo(attachment: attachment) else {
            throw AttachmentError(
                code: .remoteUnavailable,
                message: "S3 refused to create \(String(reflecting: key)) as it existed, but it is gone now; try again",
                attachmentId: attachment.id, name: key)
        }
        guard existing.sha256 != sha256.lowercased() else { return }
        throw AttachmentError(
            code: .conflict,
            message:
                "S3 holds other content as \(String(reflecting: key)) (SHA-256 \(existing.sha256 ?? "not stored"), "
                + "not \(sha256)); nothing was replaced", attachmentId: attachment.id, name: key)
    }

    /// Downloads the object into `destination` (created or replaced), streaming it chunk by chunk. On failure
    /// the bytes received so far stay in `destination`, so the download can resume with
    /// ``downloadFile(attachment:into:from:progress:)``.
    public func downloadFile(
        attachment: Attachment, to destination: URL, progress: @escaping TransferProgressHandler
    ) async throws {
        _ = try await downloadFile(attachment: attachment, into: destination, from: 0, progress: progress)
    }

    /// `true`: downloads resume with a ranged GET.
    public var supportsRangedDownloads: Bool { true }

    /// Appends the object's bytes from `offset` on to `destination` with a ranged GET, streaming; progress
    /// counts the whole object. `destination` must hold at least `offset` bytes (anything past `offset` is
    /// cut). An offset at the end appends nothing. Prefer ``downloadFile(attachment:into:from:progress:)``,
    /// which also makes sure the object did not change since those bytes were fetched.
    public func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        _ = try await download(attachment, into: destination, from: offset, requiresValidator: false, progress)
    }

    /// Downloads the object into `destination`, streaming, and returns its size and the SHA-256 stored with it
    /// at upload (`x-amz-meta-sha256`), for the queue to check the bytes against; a download from byte 0 also
    /// returns the SHA-256 of the bytes it wrote, hashed on the way. `destination` is not flushed to stable
    /// storage (the queue does that before it relies on the file).
    ///
    /// From an `offset` above 0, the rest is fetched with a ranged GET conditional on the object's `ETag`
    /// (kept beside `destination` since the first bytes came, as `.attachment-sync-etag-<name>`): when the
    /// object changed meanwhile, or nothing proves it did not, the download starts over from byte 0 instead
    /// of splicing two versions. An object whose size is not the attachment's known
    /// `Attachment.size` is refused with `integrityMismatch` before its body is read.
    public func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        try await download(attachment, into: destination, from: offset, requiresValidator: true, progress)
    }

    private func download(
        _ attachment: Attachment, into destination: URL, from offset: Int64, requiresValidator: Bool,
        _ progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        let key = try objectKey(for: attachment)
        let event = RequestEvent(operation: "GetObject", method: "GET", object: key)
        let object = try await transport.watched(event, attachmentId: attachment.id) { meter in
            try await self.transport.download(
                to: destination, from: max(0, offset), expectedSize: attachment.size,
                requiresValidator: requiresValidator, event: event, attachmentId: attachment.id, meter: meter,
                parallel: self.parallelDownloads, progress: progress
            ) { range, conditions, accepts in
                let request = S3Request(
                    method: .GET, key: key, headers: (range.map { [("range", $0)] } ?? []) + conditions,
                    operation: "GetObject")
                return try await self.send(request, attachmentId: attachment.id, accepts: accepts)
            } head: { conditions in
                let request = S3Request(method: .HEAD, key: key, headers: conditions, operation: "HeadObject")
                return try await self.send(request, attachmentId: attachment.id, accepts: { _ in true })
            }
        }
        return RemoteObjectInfo(
            size: object.size, sha256: validSHA256(object.headers.first(name: Self.sha256MetadataHeader)),
            writtenSize: object.writtenSize, writtenSHA256: object.writtenSHA256)
    }

    /// How large downloads are split, from the configuration; `nil` through presigned URLs.
    var parallelDownloads: ParallelDownloads? {
        guard presigned == nil, let threshold = configuration.parallelDownloadThreshold else { return nil }
        return ParallelDownloads(
            threshold: threshold, partSize: configuration.partSize, concurrency: configuration.partConcurrency)
    }

    /// Aborts the multipart upload of the attachment that was kept for resuming, if any, and forgets its saved
    /// state: the queue calls it when the upload will never resume (the attachment was deleted, its upload
    /// given up, or the queue cleared), so its parts stop taking space in the bucket.
    public func discardPartialUpload(attachment: Attachment) async throws {
        let key = try objectKey(for: attachment)
        let bucket = configuration.bucket
        for state in uploadStore.all() where state.bucket == bucket && state.key == key {
            let request = S3Request(
                method: .DELETE, key: key, query: [("uploadId", state.uploadId)], operation: "AbortMultipartUpload")
            let response = try await send(
                request, attachmentId: attachment.id, accepts: { (200..<300).contains($0.code) || $0 == .notFound })
            _ = try await transport.collect(
                response, event: request.event, attachmentId: attachment.id, upTo: HTTPTransport.maxErrorBody)
            uploadStore.remove(bucket: bucket, key: key, fileSize: state.fileSize)
            configuration.logger.debug("aborted a multipart upload that will not resume", metadata: ["key": "\(key)"])
        }
    }

    // MARK: - Beyond the adapter protocol

    /// A URL that downloads (`.get`) or uploads (`.put`) the attachment's object without credentials until it
    /// expires, for handing a transfer to another process or device.
    ///
    /// - Parameters:
    ///   - attachment: The attachment whose object the URL is for.
    ///   - method: What the URL allows. The default is `.get`.
    ///   - expiresIn: How long the URL works, from 1 second to 7 days. The default is 1 hour.
    /// - Returns: The presigned URL. It contains a signature (and the session token of temporary
    ///   credentials): treat it as a secret until it expires.
    /// - Throws: `invalidConfiguration` for an expiry out of range; what the credentials provider throws.
    public func presignedURL(
        for attachment: Attachment, method: PresignedMethod = .get, expiresIn: Duration = .seconds(3600)
    ) async throws -> URL {
        let key = try objectKey(for: attachment)
        let target = target(key: key)
        let credentials = try await credentialsCache.current()
        let presigned = try signer.presign(
            SigV4Signer.Request(method: method.rawValue, path: target.path, headers: [("host", target.host)]),
            credentials: credentials, date: Date(), expiresIn: expiresIn)
        let text = "\(target.scheme)://\(target.host)\(presigned.encodedPath)?\(presigned.encodedQuery)"
        guard let url = URL(string: text) else {
            throw AttachmentError(
                code: .invalidConfiguration, message: "cannot form a presigned URL for \(String(reflecting: key))",
                attachmentId: attachment.id, name: key)
        }
        return url
    }

    /// Creates the bucket; succeeds when it exists already and is yours.
    ///
    /// Apps usually get their bucket from whoever runs the store; this is for setting one up, and for tests.
    /// Outside `us-east-1` the bucket is created in ``Configuration/region``.
    public func createBucket() async throws {
        var body = Data()
        if configuration.region != "us-east-1" {
            body = Data(
                ("<CreateBucketConfiguration xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
                    + "<LocationConstraint>\(S3XML.escape(configuration.region))</LocationConstraint>"
                    + "</CreateBucketConfiguration>").utf8)
        }
        let request = S3Request(
            method: .PUT, key: nil, body: .data(body), payload: .hashing(body), operation: "CreateBucket")
        let response = try await send(request, attachmentId: nil, accepts: { _ in true })
        let reply = try await transport.collect(
            response, event: request.event, attachmentId: nil, upTo: HTTPTransport.maxErrorBody)
        guard (200..<300).contains(response.status.code) else {
            if S3XML.parseError(reply)?.code == "BucketAlreadyOwnedByYou" { return }
            throw HTTPErrorClassification.error(
                status: response.status, headers: response.headers, body: reply, service: "S3",
                operation: "CreateBucket", object: configuration.bucket, attachmentId: nil)
        }
    }

    // MARK: - Requests

    /// The object key of an attachment: the key prefix and its filename.
    func objectKey(for attachment: Attachment) throws -> String {
        guard !attachment.filename.isEmpty else {
            throw AttachmentError(
                code: .invalidName, message: "an attachment's filename is empty", attachmentId: attachment.id,
                name: attachment.filename)
        }
        return configuration.keyPrefix + attachment.filename
    }

    /// The user-metadata header that keeps an object's SHA-256 (lowercase hex).
    static let sha256MetadataHeader = "x-amz-meta-sha256"

    private func uploadHeaders(
        _ attachment: Attachment, md5: String, sha256: String
    ) -> [(name: String, value: String)] {
        var headers: [(name: String, value: String)] = [("content-md5", md5), (Self.sha256MetadataHeader, sha256)]
        if let mediaType = attachment.mediaType, !mediaType.isEmpty {
            headers.append(("content-type", mediaType))
        }
        return headers
    }

    /// Throws `integrityMismatch` when the attachment records a SHA-256 other than `sha256`, the hash of the
    /// bytes about to be uploaded: a local file changed after it was saved must not reach the remote as
    /// the attachment.
    static func checkContent(_ sha256: String, of attachment: Attachment, key: String) throws {
        guard let recorded = validSHA256(attachment.contentHash), recorded != sha256 else { return }
        throw AttachmentError(
            code: .integrityMismatch,
            message: "the content to upload as \(String(reflecting: key)) has SHA-256 \(sha256), but attachment "
                + "\(String(reflecting: attachment.id)) was saved with \(recorded); nothing was uploaded",
            attachmentId: attachment.id, name: key)
    }

    /// Scheme, `Host` header and decoded path of a request for `key` (the bucket itself when `nil`).
    func target(key: String?) -> (scheme: String, host: String, path: String) {
        configuration.target(key: key)
    }

    /// Signs and sends a request; returns the response when `accepts` its status, and otherwise throws the
    /// classified error. Credentials the server refuses are dropped from the cache.
    func send(
        _ s3Request: S3Request, attachmentId: String?,
        accepts: @escaping (HTTPResponseStatus) -> Bool = { (200..<300).contains($0.code) }
    ) async throws -> HTTPClientResponse {
        if let presigned {
            return try await sendPresigned(s3Request, with: presigned, attachmentId: attachmentId, accepts: accepts)
        }
        let credentials = try await credentialsCache.current()
        let target = target(key: s3Request.key)
        let signed = signer.sign(
            SigV4Signer.Request(
                method: s3Request.method.rawValue, path: target.path, query: s3Request.query,
                headers: [("host", target.host)] + s3Request.headers),
            payload: s3Request.payload, credentials: credentials, date: Date())
        let query = signed.encodedQuery.isEmpty ? "" : "?" + signed.encodedQuery
        var request = HTTPClientRequest(url: "\(target.scheme)://\(target.host)\(signed.encodedPath)\(query)")
        request.method = s3Request.method
        for (name, value) in signed.headers {
            request.headers.add(name: name, value: value)
        }
        request.body = s3Request.body.requestBody(for: s3Request.method)
        let response: HTTPClientResponse
        do {
            response = try await transport.send(
                request, event: s3Request.event, attachmentId: attachmentId, accepts: accepts)
        } catch let error as AttachmentError where error.code == .accessDenied {
            await credentialsCache.invalidate()
            throw error
        }
        // A refusal the caller accepts (to read its body itself) still means the credentials may be stale.
        if response.status == .forbidden || response.status == .unauthorized {
            await credentialsCache.invalidate()
        }
        return response
    }
}

/// One S3 request before signing.
struct S3Request: Sendable {
    enum Body: Sendable {
        case empty
        case data(Data)
        /// A byte range of a file, streamed; `onChunk` gets each chunk's size as it is sent.
        case file(URL, offset: Int64, length: Int64, onChunk: @Sendable (Int) -> Void)
    }

    var method: HTTPMethod
    /// The object key, or `nil` for a request on the bucket.
    var key: String?
    var query: [(name: String, value: String)] = []
    /// Headers to sign and send (`host` and the `x-amz-` ones are added).
    var headers: [(name: String, value: String)] = []
    var body: Body = .empty
    var payload: SigV4Signer.Payload = .empty
    /// The S3 operation's name, for messages and the test observer.
    var operation: String
    var partNumber: Int?
    /// The whole file's size, for `CreateMultipartUpload` (a presigning backend checks it against its limit).
    var objectSize: Int64?

    var event: RequestEvent {
        RequestEvent(operation: operation, method: method.rawValue, object: key ?? "", partNumber: partNumber)
    }
}

extension S3Request.Body {
    /// The body as the HTTP client sends it: nothing, bytes, or the file range streamed.
    func requestBody(for method: HTTPMethod) -> HTTPClientRequest.Body? {
        switch self {
        case .empty:
            return method == .PUT || method == .POST ? .bytes(ByteBuffer()) : nil
        case .data(let data):
            return .bytes(ByteBuffer(bytes: data))
        case .file(let url, let offset, let length, let onChunk):
            return .stream(
                FileChunks(url: url, offset: offset, length: length, onChunk: onChunk), length: .known(length))
        }
    }

    /// The body's length in bytes.
    var length: Int64 {
        switch self {
        case .empty: 0
        case .data(let data): Int64(data.count)
        case .file(_, _, let length, _): length
        }
    }
}
