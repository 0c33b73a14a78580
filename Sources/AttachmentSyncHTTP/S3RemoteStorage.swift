import AttachmentSync
import Foundation
import Logging

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
/// The adapter sends with the ``RemoteTransport`` it is given; call ``shutdown()`` when done with it (an
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
public final class S3RemoteStorage: RemoteStorageAdapter, DownloadSinkAdapter {
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
    /// How each request is authorised: signed with ``Configuration/credentials``, or sent to the URL a
    /// backend presigned for it when the adapter works for ``PresignedRemoteStorage``.
    let authorizer: any S3RequestAuthorizer
    let uploadStore: MultipartUploadStore
    /// Whether ``shutdown()`` has run.
    private let isShutDown = LockedValue(false)

    /// Creates an adapter.
    ///
    /// - Parameters:
    ///   - configuration: The server, bucket, credentials and options.
    ///   - transport: The HTTP client library to send with (see ``RemoteTransport``), with the configured
    ///     timeouts.
    /// - Throws: `AttachmentError` with code `invalidConfiguration` naming the first option out
    ///   of range (a part size under 5 MiB, say).
    public convenience init(configuration: Configuration, transport: RemoteTransport) throws {
        try self.init(
            configuration: configuration,
            engine: { transport.makeEngine(configuration.connectTimeout, configuration.requestTimeout) },
            authorizer: SigV4RequestAuthorizer(configuration: configuration))
    }

    /// Creates an adapter that sends through the engine `makeEngine` makes once the configuration is valid,
    /// and gets each request authorised by `authorizer`.
    init(
        configuration: Configuration, engine makeEngine: () -> any HTTPEngine, authorizer: any S3RequestAuthorizer
    ) throws {
        try configuration.validate()
        let engine = makeEngine()
        self.authorizer = authorizer
        self.configuration = configuration
        self.transport = HTTPTransport(
            engine: engine, service: "S3", logger: configuration.logger, observer: configuration.requestObserver,
            minimumRate: configuration.minimumTransferRate, clock: configuration.clock, files: configuration.files,
            now: configuration.now)
        self.uploadStore = MultipartUploadStore(directory: configuration.stateDirectory)
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

    // MARK: - RemoteStorageAdapter

    /// Uploads `data` as the attachment's object in one request, with its MD5 and SHA-256 for the server to
    /// check, and its SHA-256 stored with the object (`x-amz-meta-sha256`) for every later download to check.
    ///
    /// - Throws: `integrityMismatch` when the attachment's `Attachment.contentHash` says its
    ///   content is other bytes.
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        let key = try objectKey(for: attachment)
        let digests = PayloadDigests.of(data, md5: configuration.sendsContentMD5)
        try Self.checkContent(digests.sha256, of: attachment, key: key)
        try await BandwidthThrottle.current?.take(data.count)
        let request = S3Request(
            method: .put, key: key, headers: uploadHeaders(attachment, md5: digests.md5, sha256: digests.sha256),
            body: .data(data), payload: .sha256(digests.sha256), operation: "PutObject")
        try await putObject(request, sha256: digests.sha256, attachment: attachment)
    }

    /// Downloads the attachment's object into memory; throws `remoteNotFound` when there is none.
    ///
    /// Objects larger than `HTTPTransport.maximumInMemoryDownload` (1 GiB) fail with `unsupported`: use the
    /// streaming ``downloadFile(attachment:into:from:progress:)``, which the queue always calls.
    public func downloadFile(attachment: Attachment) async throws -> Data {
        let key = try objectKey(for: attachment)
        let request = S3Request(method: .get, key: key, operation: "GetObject")
        let response = try await send(request, attachmentId: attachment.id) { $0 == .ok }
        return try await transport.collectObject(response, event: request.event, attachmentId: attachment.id)
    }

    /// Deletes the attachment's object; succeeds when there is none.
    public func deleteFile(attachment: Attachment) async throws {
        let key = try objectKey(for: attachment)
        let request = S3Request(method: .delete, key: key, operation: "DeleteObject")
        let response = try await send(request, attachmentId: attachment.id, accepts: { _ in true })
        let body = try await transport.collect(
            response, event: request.event, attachmentId: attachment.id, upTo: HTTPTransport.maxErrorBody)
        guard (200..<300).contains(response.status.code) else {
            let error = transport.error(for: response, body: body, event: request.event, attachmentId: attachment.id)
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
        let size = try transport.files.size(ofFileAt: fileURL.path)
        if size > configuration.multipartThreshold {
            try await uploadMultipart(
                fileURL: fileURL, size: size, key: key, attachment: attachment, progress: progress)
            return
        }
        let digests = try await PayloadDigests.of(
            fileAt: fileURL, offset: 0, length: size, md5: configuration.sendsContentMD5, files: transport.files)
        try Self.checkContent(digests.sha256, of: attachment, key: key)
        let event = RequestEvent(operation: "PutObject", method: "PUT", object: key)
        try await transport.watched(event, attachmentId: attachment.id) { meter in
            let sent = UploadProgress(totalBytes: size, progress: progress)
            let body = S3Request.Body.file(fileURL, offset: 0, length: size) { count in
                meter.add(Int64(count))
                sent.add(count)
            }
            let request = S3Request(
                method: .put, key: key,
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
        _ = try await transport.downloadObject(
            try objectDownload(attachment), into: destination, from: offset, requiresValidator: false,
            progress: progress)
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
        try await transport.downloadObject(
            try objectDownload(attachment), into: destination, from: offset, requiresValidator: true,
            progress: progress)
    }

    /// How the attachment's object is downloaded: `GetObject` and `HeadObject` on its key, its stored SHA-256 in
    /// the `x-amz-meta-sha256` header.
    private func objectDownload(_ attachment: Attachment) throws -> ObjectDownload {
        let key = try objectKey(for: attachment)
        return ObjectDownload(
            attachment: attachment, event: RequestEvent(operation: "GetObject", method: "GET", object: key),
            parallel: parallelDownloads, storedSHA256: .header(Self.sha256MetadataHeader)
        ) { method, headers, accepts in
            let operation = method == .head ? "HeadObject" : "GetObject"
            let request = S3Request(method: method, key: key, headers: headers, operation: operation)
            return try await self.send(request, attachmentId: attachment.id, accepts: accepts)
        }
    }

    /// How large downloads are split, from the configuration; `nil` when the authorizer does not split them.
    var parallelDownloads: ParallelDownloads? {
        guard authorizer.splitsDownloads, let threshold = configuration.parallelDownloadThreshold else { return nil }
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
                method: .delete, key: key, query: [("uploadId", state.uploadId)], operation: "AbortMultipartUpload")
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
        try await authorizer.presignedURL(
            key: try objectKey(for: attachment), method: method, expiresIn: expiresIn, attachmentId: attachment.id)
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
            method: .put, key: nil, body: .data(body), payload: .hashing(body), operation: "CreateBucket")
        let response = try await send(request, attachmentId: nil, accepts: { _ in true })
        let reply = try await transport.collect(
            response, event: request.event, attachmentId: nil, upTo: HTTPTransport.maxErrorBody)
        guard (200..<300).contains(response.status.code) else {
            if S3XML.parseError(reply)?.code == "BucketAlreadyOwnedByYou" { return }
            throw transport.error(
                for: response, body: reply, event: request.event, attachmentId: nil, object: configuration.bucket)
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

    /// The headers of an upload of the attachment: its `Content-MD5` when there is one, its SHA-256 stored
    /// with the object, and its media type.
    func uploadHeaders(
        _ attachment: Attachment, md5: String?, sha256: String
    ) -> [(name: String, value: String)] {
        var headers: [(name: String, value: String)] = md5.map { [("content-md5", $0)] } ?? []
        headers.append((Self.sha256MetadataHeader, sha256))
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

    /// Sends a request authorised by the ``authorizer``; returns the response when `accepts` its status, and
    /// otherwise throws the classified error.
    ///
    /// A refusal (401 or 403, or an error code that means bad credentials) is told to the authorizer (which
    /// drops what it cached), and when the authorizer renews refused requests the request is sent once more
    /// with a renewed authorisation; the answer to that try is final. A streamed body sent twice reports its
    /// progress once.
    func send(
        _ s3Request: S3Request, attachmentId: String?,
        accepts: @escaping (HTTPStatus) -> Bool = { $0.isSuccess }
    ) async throws -> HTTPEngineResponse {
        let attempt = s3Request.reportingProgressOnce()
        let request = attempt.request
        var renewing = false
        while true {
            let authorized = try await authorizer.authorize(request, renewing: renewing)
            attempt.startAttempt()
            let httpRequest = HTTPEngineRequest(
                method: request.method, url: authorized.url, headers: HTTPHeaderFields(authorized.headers),
                body: request.body.requestBody(for: request.method, files: transport.files))
            let mayRenew = !renewing && authorizer.renewsRefusedRequests
            let response: HTTPEngineResponse
            do {
                response = try await transport.send(
                    httpRequest, event: request.event, attachmentId: attachmentId,
                    accepts: { accepts($0) || (mayRenew && Self.isRefusal($0)) })
            } catch let error as AttachmentError where error.code == .accessDenied {
                await authorizer.refused(request, retrying: false)
                throw error
            }
            // A refusal the caller accepts (to read its body itself) still means the authorisation may be stale.
            guard Self.isRefusal(response.status) else { return response }
            if mayRenew {
                _ = try? await response.body.collect(upTo: HTTPTransport.maxErrorBody)
            }
            await authorizer.refused(request, retrying: mayRenew)
            guard mayRenew else { return response }
            renewing = true
        }
    }

    /// Whether a status says the server refused the request's authorisation.
    static func isRefusal(_ status: HTTPStatus) -> Bool {
        status == .forbidden || status == .unauthorized
    }
}
