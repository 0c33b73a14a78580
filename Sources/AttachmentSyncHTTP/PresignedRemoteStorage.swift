import AttachmentSync
import Foundation
import Logging

/// Remote storage in an S3-compatible bucket through URLs your backend presigns: the app holds no storage
/// credentials at all, and the backend decides, request by request, what each user may do.
///
/// You give one closure, ``Configuration/authorize``, that sends a ``PresignedOperation`` (upload, download,
/// delete, or a step of a multipart upload, with its size and checksums) to your backend and returns its
/// ``PresignedAuthorization``: a URL, the headers to send with it, and when it expires. On the server,
/// ``PresignedURLIssuer`` answers those operations with SigV4 presigned URLs under a key prefix of your
/// choice, enforcing a size limit.
///
/// Everything else is ``S3RemoteStorage``'s: files stream both ways with bounded memory, large files upload in
/// resumable parts (every part authorised on its own), downloads resume with ranged reads, every object keeps
/// its SHA-256 for later downloads to check, uploads are create-only (a different object under the name is a
/// `AttachmentError.Code.conflict`, never replaced) and failures carry the
/// same error codes.
///
/// - Authorisations are reused for an equal operation until ``Configuration/renewalMargin`` before they
///   expire; one that the server refuses (401/403: expired, revoked, a clock off) is asked for again at once,
///   once, for any request, a part of a multipart upload included.
/// - A closure that throws ``Denied`` (or an `AttachmentError` with code `accessDenied`, or a
///   ``RemoteHTTPError`` with status 401 or 403) fails the request with `accessDenied`, without asking
///   again: the queue's backoff decides when to try. Any other error from the closure is `remoteUnavailable`
///   (the backend could not be reached).
/// - The URLs are credentials: no log line, error or description ever contains their query.
///
/// ```swift
/// let storage = try PresignedRemoteStorage(configuration: .init { operation in
///     // POST the operation to your backend, which answers with PresignedURLIssuer.authorize(_:)
///     try await backend.authorize(operation)
/// })
/// let queue = AttachmentQueue(db: db, attachmentsDirectory: dir, remoteStorage: storage, watchAttachments: …)
/// ```
public final class PresignedRemoteStorage: RemoteStorageAdapter, DownloadSinkAdapter {
    /// Thrown by your ``Configuration/authorize`` closure when the backend refuses an operation; the request
    /// fails with `accessDenied` and the reason.
    public struct Denied: Error, Sendable, Hashable, CustomStringConvertible {
        /// Why the backend refused, for the error message (never anything secret).
        public var reason: String

        /// Creates a refusal.
        ///
        /// - Parameter reason: Why the backend refused.
        public init(_ reason: String) {
            self.reason = reason
        }

        /// The reason.
        public var description: String { reason }
    }

    /// Every option of ``PresignedRemoteStorage``, with its default.
    public struct Configuration: Sendable {
        /// Asks your backend to authorise one operation. Called once per operation (concurrent requests for
        /// the same one share the call), again when the authorisation is about to expire or the server
        /// refused it.
        public var authorize: @Sendable (PresignedOperation) async throws -> PresignedAuthorization
        /// How long before an authorisation's ``PresignedAuthorization/expiresAt`` it is no longer used for a
        /// new request. The default is 60 seconds.
        public var renewalMargin: Duration = .seconds(60)
        /// Whether uploads are create-only (see ``S3RemoteStorage/Configuration/createOnly``); a backend
        /// built on ``PresignedURLIssuer`` enforces it whatever this says. The default is `true`.
        public var createOnly: Bool = true
        /// Files larger than this are uploaded in parts, at least 5 MiB. The default is 16 MiB.
        public var multipartThreshold: Int64 = 16 * 1024 * 1024
        /// The size of each part, at least 5 MiB; the backend may cap it (see
        /// ``PresignedURLIssuer/maxPartSize``). The default is 8 MiB.
        public var partSize: Int64 = 8 * 1024 * 1024
        /// How many parts of one file are uploaded at once, at least 1. The default is 4.
        public var partConcurrency: Int = 4
        /// How long connecting to the server may take. The default is 10 seconds.
        public var connectTimeout: Duration = .seconds(10)
        /// How long a request may go without moving a byte. The default is 60 seconds.
        public var requestTimeout: Duration = .seconds(60)
        /// Where the state of multipart uploads in progress is kept, so they resume after a restart. The
        /// default is ``S3RemoteStorage/Configuration/defaultStateDirectory``.
        public var stateDirectory: URL = S3RemoteStorage.Configuration.defaultStateDirectory
        /// The slowest a transfer may move before it is stopped and left for the queue to retry. The default
        /// is ``MinimumTransferRate/default``.
        public var minimumTransferRate: MinimumTransferRate? = .default
        /// The clock ``minimumTransferRate`` is measured with. The default is a `ContinuousClock`.
        public var clock: any Clock<Duration> = ContinuousClock()
        /// The current date, compared with authorisations' expiry, and the one a `Retry-After` given as an HTTP
        /// date is counted from (tests pass their own). The default is `Date()`.
        public var now: @Sendable () -> Date = { Date() }
        /// Where the adapter logs, at debug level; never a URL's query. The default discards everything.
        public var logger: Logger = Logger(label: "AttachmentSyncS3.PresignedRemoteStorage") { _ in
            SwiftLogNoOpLogHandler()
        }

        /// Sees every request before it is sent (tests count and fail requests with it).
        var requestObserver: RequestObserver?

        /// Creates a configuration with your authorising closure and defaults for the rest.
        ///
        /// - Parameter authorize: Asks your backend to authorise an operation.
        public init(authorize: @escaping @Sendable (PresignedOperation) async throws -> PresignedAuthorization) {
            self.authorize = authorize
        }

        /// The configuration of the S3 adapter that does the work: no endpoint, bucket or credentials of its
        /// own (its authorizer sends every request to a presigned URL, and a request no backend authorises, such
        /// as creating a bucket, fails), a bucket name that no real bucket has for the state of its multipart
        /// uploads.
        var storageConfiguration: S3RemoteStorage.Configuration {
            var configuration = S3RemoteStorage.Configuration(
                endpoint: URL(string: "https://presigned.invalid")!, bucket: "presigned:",
                credentials: .custom {
                    throw AttachmentError(
                        code: .unsupported, message: "PresignedRemoteStorage holds no credentials to sign with",
                        name: "credentials")
                })
            configuration.createOnly = createOnly
            configuration.multipartThreshold = multipartThreshold
            configuration.partSize = partSize
            configuration.partConcurrency = partConcurrency
            configuration.connectTimeout = connectTimeout
            configuration.requestTimeout = requestTimeout
            configuration.stateDirectory = stateDirectory
            configuration.minimumTransferRate = minimumTransferRate
            configuration.clock = clock
            configuration.now = now
            configuration.logger = logger
            configuration.requestObserver = requestObserver
            return configuration
        }
    }

    /// The options this adapter was created with.
    public let configuration: Configuration
    let storage: S3RemoteStorage
    let authorizations: PresignedAuthorizations

    /// Creates an adapter.
    ///
    /// - Parameters:
    ///   - configuration: The authorising closure and options.
    ///   - transport: The HTTP client library to send with (see ``RemoteTransport``), with the configured
    ///     timeouts.
    /// - Throws: `invalidConfiguration` naming the first option out of range.
    public init(configuration: Configuration, transport: RemoteTransport) throws {
        guard configuration.renewalMargin >= .zero else {
            throw AttachmentError(
                code: .invalidConfiguration, message: "renewalMargin is negative: \(configuration.renewalMargin)",
                name: "renewalMargin")
        }
        self.configuration = configuration
        authorizations = PresignedAuthorizations(
            authorize: configuration.authorize, margin: configuration.renewalMargin, now: configuration.now)
        storage = try S3RemoteStorage(
            configuration: configuration.storageConfiguration,
            engine: { transport.makeEngine(configuration.connectTimeout, configuration.requestTimeout) },
            authorizer: PresignedRequestAuthorizer(authorizations: authorizations, logger: configuration.logger))
    }

    /// Shuts down the HTTP client the adapter created (one you passed in is left alone); calling it again
    /// does nothing.
    public func shutdown() async throws {
        try await storage.shutdown()
    }

    /// Uploads `data` in one request, create-only, with its MD5 for the server to check and its SHA-256
    /// stored with the object.
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        try await storage.uploadFile(data: data, attachment: attachment)
    }

    /// Downloads the file into memory (up to 1 GiB; the queue uses the streaming form).
    public func downloadFile(attachment: Attachment) async throws -> Data {
        try await storage.downloadFile(attachment: attachment)
    }

    /// Deletes the file; succeeds when there is none.
    public func deleteFile(attachment: Attachment) async throws {
        try await storage.deleteFile(attachment: attachment)
    }

    /// Uploads the file, streaming it: in one request up to ``Configuration/multipartThreshold``, in parts
    /// above it, each authorised on its own and resumable after a restart.
    public func uploadFile(
        fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        try await storage.uploadFile(fileURL: fileURL, attachment: attachment, progress: progress)
    }

    /// Downloads the file into `destination`, streaming it.
    public func downloadFile(
        attachment: Attachment, to destination: URL, progress: @escaping TransferProgressHandler
    ) async throws {
        try await storage.downloadFile(attachment: attachment, to: destination, progress: progress)
    }

    /// `true`: downloads resume with a ranged GET.
    public var supportsRangedDownloads: Bool { true }

    /// Appends the file's bytes from `offset` on to `destination` (see
    /// ``S3RemoteStorage/downloadFile(attachment:appendingTo:from:progress:)``).
    public func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        try await storage.downloadFile(
            attachment: attachment, appendingTo: destination, from: offset, progress: progress)
    }

    /// Downloads the file into `destination` from `offset` on, resuming only when the object is provably the
    /// one the first bytes came from, and returns its size and stored SHA-256 (see
    /// ``S3RemoteStorage/downloadFile(attachment:into:from:progress:)``).
    public func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        try await storage.downloadFile(attachment: attachment, into: destination, from: offset, progress: progress)
    }

    /// Aborts the multipart upload of the attachment kept for resuming, if any.
    public func discardPartialUpload(attachment: Attachment) async throws {
        try await storage.discardPartialUpload(attachment: attachment)
    }

    /// The file's size and stored SHA-256, from a `HEAD`; `nil` when there is none.
    public func fileInfo(attachment: Attachment) async throws -> RemoteObjectInfo? {
        try await storage.fileInfo(attachment: attachment)
    }

    /// How many times the authorising closure was called, for tests.
    var authorizationCalls: Int {
        get async { await authorizations.calls }
    }
}
