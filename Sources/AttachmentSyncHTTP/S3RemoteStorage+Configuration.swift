import AttachmentSync
import Foundation
import Logging

extension S3RemoteStorage {
    /// How the bucket is named in request URLs.
    public enum Addressing: Sendable, Hashable {
        /// `https://endpoint/bucket/key`: works with every S3-compatible server (Ceph, MinIO, a local gateway)
        /// and with buckets whose names contain dots.
        case path
        /// `https://bucket.endpoint/key`: what AWS prefers; the bucket's host name must resolve.
        case virtualHost
    }

    /// Where the adapter gets the keys it signs requests with.
    ///
    /// Printing or dumping one (or a ``Configuration`` holding it) never shows a secret or a session token.
    public enum CredentialsProvider: Sendable, CustomStringConvertible, CustomReflectable {
        /// Fixed keys, with an optional session token (the default is `nil`).
        case `static`(accessKeyId: String, secretAccessKey: String, sessionToken: String? = nil)
        /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and (optionally) `AWS_SESSION_TOKEN` from the process's
        /// environment, read at each request.
        case environment
        /// Your closure, for apps that fetch temporary credentials from their backend. The adapter caches what
        /// it returns and calls it again a few minutes (``Configuration/credentialsRefreshMargin``) before
        /// ``S3Credentials/expiration``, or after the server refuses the credentials; concurrent requests share
        /// one call.
        case custom(@Sendable () async throws -> S3Credentials)

        /// `static(accessKeyId: …, secretAccessKey: <redacted>)`, `environment` or `custom`.
        public var description: String {
            switch self {
            case .static(let accessKeyId, _, let sessionToken):
                "static(accessKeyId: \(accessKeyId), secretAccessKey: <redacted>"
                    + (sessionToken == nil ? ")" : ", sessionToken: <redacted>)")
            case .environment: "environment"
            case .custom: "custom"
            }
        }

        /// The description only, so `dump` shows no secret either.
        public var customMirror: Mirror {
            Mirror(self, children: ["provider": description])
        }
    }

    /// Every option of ``S3RemoteStorage``, with its default.
    ///
    /// ```swift
    /// var configuration = S3RemoteStorage.Configuration(
    ///     endpoint: URL(string: "https://s3.eu-west-1.amazonaws.com")!,
    ///     region: "eu-west-1",
    ///     bucket: "my-app-attachments",
    ///     credentials: .environment
    /// )
    /// configuration.keyPrefix = "attachments/"
    /// let storage = try S3RemoteStorage(configuration: configuration)
    /// ```
    public struct Configuration: Sendable {
        /// The server's base URL, `https://s3.eu-west-1.amazonaws.com` or `http://127.0.0.1:7480` say. A path
        /// in it is kept in front of every request's path.
        public var endpoint: URL
        /// The region requests are signed for. Servers that ignore regions (Ceph, MinIO) accept `us-east-1`.
        public var region: String
        /// The bucket that holds the files.
        public var bucket: String
        /// Where the keys come from.
        public var credentials: CredentialsProvider
        /// Prepended to every `Attachment.filename` to make its object key (`attachments/`,
        /// say), so several apps or users can share a bucket. The default is `""`.
        public var keyPrefix: String = ""
        /// How the bucket is named in URLs. The default is ``Addressing/path``.
        public var addressing: Addressing = .path
        /// Whether uploads are create-only: an object with other content under the key is never replaced.
        /// A single `PutObject` carries `If-None-Match: *` (AWS S3, Ceph, MinIO and Cloudflare R2 refuse it
        /// with 412 when the key exists). A multipart upload, fresh or resumed, looks at the key (`HEAD`)
        /// before it starts, before it resumes and right before it completes, completes with
        /// `If-None-Match: *` (AWS honours it there, Ceph does not), and checks the stored SHA-256 after.
        /// An existing object stored with the same SHA-256 is success (an upload repeated after its answer was
        /// lost; a multipart upload is then aborted, not completed); another is
        /// `AttachmentError.Code.conflict`, and so is other content found right
        /// after a completion. On a server that ignores the condition on completion, an object stored between
        /// the last look and the completion (about 50 ms on a local Ceph) is replaced; bucket versioning keeps
        /// it. A server that ignores `If-None-Match` on `PutObject` too replaces objects as before. The
        /// default is `true`.
        public var createOnly: Bool = true
        /// Whether an upload whose signature covers its body's SHA-256 also sends the body's MD5
        /// (`Content-MD5`). Either makes the server refuse bytes that changed between the hashing and the
        /// send; AWS S3 and Ceph RGW (16.2, tested here) check both. Turn it off only for a server known to
        /// check the signed SHA-256 (`XAmzContentSHA256Mismatch`): uploads then skip their MD5 pass, which
        /// costs about twice SHA-256's CPU time per byte (1.7 s per GiB on the benchmark's machine). Uploads
        /// signed without their SHA-256 (``S3RemoteStorage/backgroundUploadRequest(for:fileURL:)``, presigned
        /// URLs) send it whatever this says. The default is `true`.
        public var sendsContentMD5: Bool = true
        /// Files larger than this are uploaded in parts (multipart upload), resumable after a restart; at least
        /// 5 MiB. The default is 16 MiB.
        public var multipartThreshold: Int64 = 16 * 1024 * 1024
        /// The size of each part of a multipart upload, and of each range of a download split by
        /// ``parallelDownloadThreshold``; at least 5 MiB (S3's minimum). A file so large that it would need more
        /// than 10,000 parts (S3's maximum) is uploaded in bigger parts. The default is 8 MiB.
        public var partSize: Int64 = 8 * 1024 * 1024
        /// How many parts of one file are uploaded, or ranges of one object downloaded, at once; at least 1.
        /// The default is 4.
        public var partConcurrency: Int = 4
        /// Objects at least this large are downloaded as ranges of ``partSize`` bytes, ``partConcurrency`` at
        /// once, each written at its place in the file, when the server accepts range requests; each range is
        /// conditional on the first response's `ETag`, so all come from one version of the object. `nil`
        /// downloads every object with one streamed `GET`. Not used through ``PresignedRemoteStorage``, whose
        /// URLs the app's backend makes one download at a time. The default is 32 MiB.
        public var parallelDownloadThreshold: Int64? = 32 * 1024 * 1024
        /// How long connecting to the server may take. Applies to the client the adapter creates, not to one
        /// you pass in. The default is 10 seconds.
        public var connectTimeout: Duration = .seconds(10)
        /// How long a request may go without sending or receiving a byte before it fails with
        /// `AttachmentError.Code.remoteUnavailable`; a transfer that keeps
        /// moving is never cut off. Applies to the client the adapter creates, not to one you pass in. The
        /// default is 60 seconds.
        public var requestTimeout: Duration = .seconds(60)
        /// How long before temporary credentials expire the adapter asks its provider for new ones. The default
        /// is 5 minutes.
        public var credentialsRefreshMargin: Duration = .seconds(300)
        /// The folder that holds the state of multipart uploads in progress (one small JSON file each: upload
        /// id and completed parts), so an upload interrupted by a crash or restart continues with the missing
        /// parts. The default is `AttachmentSyncS3/multipart-uploads` in the user's caches folder (the
        /// temporary folder when there is none).
        public var stateDirectory: URL = Configuration.defaultStateDirectory
        /// The slowest an object transfer (an upload, a part, a download) may move before it is stopped with
        /// `AttachmentError.Code.remoteUnavailable` and left for the queue to try
        /// again, so a server that trickles bytes cannot hold it for ever; `nil` lets transfers take any time.
        /// See ``MinimumTransferRate``. The default is ``MinimumTransferRate/default``: 16 KiB in every 30
        /// seconds.
        public var minimumTransferRate: MinimumTransferRate? = .default
        /// The clock ``minimumTransferRate`` is measured with (tests pass a manual one). The default is a
        /// `ContinuousClock`.
        public var clock: any Clock<Duration> = ContinuousClock()
        /// The current date: the date every request and presigned URL is signed with, and the one temporary
        /// credentials' expiry, a `Retry-After` given as an HTTP date and the age of stale multipart uploads are
        /// counted from. S3 refuses a request signed more than 15 minutes off its own clock
        /// (`RequestTimeTooSkewed`, an `accessDenied`): an app whose devices' clocks may be wrong can pass the
        /// date corrected by the server's; tests pass their own. The default is `Date()`.
        public var now: @Sendable () -> Date = { Date() }
        /// Where the adapter logs requests and failures, at debug level; never credentials or file contents.
        /// The default discards everything.
        public var logger: Logger = Logger(label: "AttachmentSyncS3.S3RemoteStorage") { _ in SwiftLogNoOpLogHandler() }

        /// Sees every request before it is sent (tests count and fail requests with it).
        var requestObserver: RequestObserver?
        /// The file layer uploads are read and downloads written through (tests pass their own).
        var files: any FileOperations = SystemFileOperations()

        /// Creates a configuration with the given server, bucket and credentials, and defaults for the rest.
        ///
        /// - Parameters:
        ///   - endpoint: The server's base URL.
        ///   - region: The region to sign for. The default is `us-east-1`.
        ///   - bucket: The bucket.
        ///   - credentials: Where the keys come from.
        ///   - keyPrefix: Prepended to every filename. The default is `""`.
        ///   - addressing: Path-style or virtual-host URLs. The default is ``Addressing/path``.
        public init(
            endpoint: URL, region: String = "us-east-1", bucket: String, credentials: CredentialsProvider,
            keyPrefix: String = "", addressing: Addressing = .path
        ) {
            self.endpoint = endpoint
            self.region = region
            self.bucket = bucket
            self.credentials = credentials
            self.keyPrefix = keyPrefix
            self.addressing = addressing
        }

        /// The default ``stateDirectory``.
        public static var defaultStateDirectory: URL {
            let base =
                FileManager.default.urls(for: .cachesDirectory, in: .userDomainMask).first
                ?? FileManager.default.temporaryDirectory
            return base.appendingPathComponent("AttachmentSyncS3", isDirectory: true)
                .appendingPathComponent("multipart-uploads", isDirectory: true)
        }

        /// The smallest part S3 accepts (except for the last part): 5 MiB.
        public static let minimumPartSize: Int64 = 5 * 1024 * 1024

        /// Throws `AttachmentError.Code.invalidConfiguration` naming the first
        /// option out of range.
        func validate() throws {
            func fail(_ name: String, _ reason: String) -> AttachmentError {
                AttachmentError(code: .invalidConfiguration, message: "\(name) \(reason)", name: name)
            }
            guard HTTPURL.isServer(endpoint) else {
                throw fail("endpoint", "must be an http or https URL with a host, not \(endpoint)")
            }
            guard !region.isEmpty else { throw fail("region", "is empty") }
            guard !bucket.isEmpty, !bucket.contains("/") else {
                throw fail("bucket", "must be a bucket name, not \(String(reflecting: bucket))")
            }
            guard multipartThreshold >= Self.minimumPartSize else {
                throw fail("multipartThreshold", "must be at least 5 MiB (5242880 bytes), not \(multipartThreshold)")
            }
            guard partSize >= Self.minimumPartSize else {
                throw fail("partSize", "must be at least 5 MiB (5242880 bytes), not \(partSize)")
            }
            guard partSize <= 5 * 1024 * 1024 * 1024 else {
                throw fail("partSize", "must be at most 5 GiB, not \(partSize)")
            }
            if let parallelDownloadThreshold, parallelDownloadThreshold < 1 {
                throw fail("parallelDownloadThreshold", "must be positive or nil, not \(parallelDownloadThreshold)")
            }
            guard partConcurrency >= 1 else {
                throw fail("partConcurrency", "must be at least 1, not \(partConcurrency)")
            }
            guard connectTimeout > .zero else {
                throw fail("connectTimeout", "must be positive, not \(connectTimeout)")
            }
            guard requestTimeout > .zero else {
                throw fail("requestTimeout", "must be positive, not \(requestTimeout)")
            }
            try minimumTransferRate?.validate(as: "minimumTransferRate")
            guard credentialsRefreshMargin >= .zero else {
                throw fail("credentialsRefreshMargin", "is negative: \(credentialsRefreshMargin)")
            }
            if case .static(let accessKeyId, let secretAccessKey, _) = credentials,
                accessKeyId.isEmpty || secretAccessKey.isEmpty
            {
                throw fail("credentials", "has an empty access key id or secret")
            }
        }
    }
}

extension S3RemoteStorage.Configuration {
    /// Scheme, `Host` header and decoded path of a request for `key` (the bucket itself when `nil`).
    func target(key: String?) -> (scheme: String, host: String, path: String) {
        let endpoint = self.endpoint
        let scheme = endpoint.scheme?.lowercased() ?? "https"
        var host = endpoint.host ?? ""
        if host.contains(":") { host = "[\(host)]" }
        if addressing == .virtualHost {
            host = "\(bucket).\(host)"
        }
        if let port = endpoint.port, port != (scheme == "https" ? 443 : 80) {
            host += ":\(port)"
        }
        var path = endpoint.path
        while path.hasSuffix("/") { path.removeLast() }
        if addressing == .path {
            path += "/" + bucket
        }
        if let key {
            path += "/" + key
        }
        return (scheme, host, path.isEmpty ? "/" : path)
    }
}
