import AttachmentSync
import Foundation

/// The backend half of ``PresignedRemoteStorage``: answers a device's ``PresignedOperation`` with a SigV4
/// presigned URL for one object under a key prefix, after checking the operation against its limits.
///
/// Call it from your server's route (Vapor, Hummingbird, anything) after authenticating the user, with a key
/// prefix of that user's; the device never sees a key, a bucket or a credential, only URLs that expire.
///
/// What it enforces, by signing the headers that carry it (the storage server refuses a request whose signed
/// headers differ):
/// - **Where**: the object is ``S3RemoteStorage/Configuration/keyPrefix`` + the filename, and a filename
///   with `/`, `\`, control characters, `.` or `..` is refused (`invalidName`), so a device cannot reach
///   another prefix.
/// - **What**: only ``allowedOperations``.
/// - **How big**: a single upload's `content-length` is signed and at most ``maxObjectSize``; a multipart
///   upload is started only for an ``PresignedOperation/objectSize`` up to ``maxObjectSize``, and each part's
///   `content-length` is signed and at most ``maxPartSize`` and what is left of ``maxObjectSize`` after the
///   parts before it at S3's 5 MiB minimum. The parts a device has uploaded are not counted (the issuer is
///   stateless), so a device that breaks those rules on purpose could complete an object of up to
///   ``maxObjectSize`` × ``maxPartSize`` / 5 MiB; check the object's size after completion where that matters.
/// - **No replacing**: when ``requiresCreateOnly`` (the default), a single upload carries a signed
///   `If-None-Match: *`, and a multipart upload is neither started nor completed over an existing object (a
///   `HEAD` first; its completion URL works for ``completeExpiresIn`` only and carries a signed
///   `If-None-Match: *` for servers that honour it there, as AWS does and Ceph does not).
/// - **No copying in, nothing public**: uploads are signed with ``uploadCredentials``, which should create
///   objects and read none (Ceph acts on an unsigned `x-amz-copy-source` a device adds to an upload URL, and
///   copies whatever the signing key can read), and with ``cannedACL``, which a device cannot change or add
///   grants to. Before its first upload authorisation the issuer checks both on the server itself (see
///   ``verifiesConfinement``) and authorises no upload until they hold.
/// - **Integrity**: the `Content-MD5` and the SHA-256 the device declares are signed, so the server checks
///   the body against the MD5 and stores that SHA-256 for every download to check.
///
/// Refusals throw `AttachmentError` (`accessDenied` or `invalidName`, naming the offending
/// value): answer them with HTTP 403 and have the device's closure throw ``PresignedRemoteStorage/Denied``.
///
/// ```swift
/// // On the server, once:
/// let issuer = try PresignedURLIssuer(
///     storage: .init(endpoint: s3Endpoint, region: "eu-west-1", bucket: "app-files", credentials: .environment),
///     maxObjectSize: 200 * 1024 * 1024,
///     uploadCredentials: .static(accessKeyId: uploadKeyId, secretAccessKey: uploadSecret))
/// // In the route that answers POST /attachments/authorize, for a signed-in user:
/// let authorization = try await issuer.forUser(prefix: "users/\(user.id)/").authorize(operation)
/// ```
public struct PresignedURLIssuer: Sendable {
    /// The server, bucket, key prefix and credentials the URLs are signed for: downloads, `HEAD`s, deletes and
    /// part listings with its credentials, uploads with ``uploadCredentials`` (the other options of the
    /// configuration are not used).
    public private(set) var storage: S3RemoteStorage.Configuration
    /// The credentials upload URLs are signed with (single uploads and every step of a multipart upload but
    /// its part listing): ideally a key that can create objects under the prefix and read none, such as a
    /// Ceph subuser with `--access write`, so that no upload URL can copy an object in. The default is
    /// `storage.credentials`.
    public let uploadCredentials: S3RemoteStorage.CredentialsProvider
    /// The largest object a device may upload, in bytes.
    public var maxObjectSize: Int64
    /// The largest part of a multipart upload, in bytes. The default is 16 MiB, raised to what a file of
    /// ``maxObjectSize`` needs to fit S3's 10,000 parts.
    public var maxPartSize: Int64
    /// How long each URL works, 1 second to 7 days. The default is 15 minutes.
    public var expiresIn: Duration = .seconds(900)
    /// How long a URL that completes a multipart upload works, at most ``expiresIn``: the issuer found no
    /// object under the name when it signed it, and a short life keeps a device from completing over an object
    /// stored later. The default is 60 seconds.
    public var completeExpiresIn: Duration = .seconds(60)
    /// The canned ACL every single upload and multipart upload is signed with (`x-amz-acl`), or `nil` for
    /// none. Signed, it cannot be changed by the device, and servers refuse grant headers beside it, so a
    /// device cannot make its object readable by others. `bucket-owner-full-control` is the one value AWS
    /// accepts on buckets with ACLs disabled. The default is `"bucket-owner-full-control"`.
    public var cannedACL: String? = "bucket-owner-full-control"
    /// Whether the issuer checks, once, on the server, before its first upload authorisation, that an upload
    /// URL it signs cannot copy another object in (`x-amz-copy-source`, with or without a range, added
    /// unsigned by the device) nor make its object public (`x-amz-acl`, `x-amz-grant-*`), and authorises no
    /// upload while it can.
    ///
    /// The check writes and deletes a few small objects named `.attachment-sync-probe-…` under the key
    /// prefix of the first upload authorised, and reads them back with ``storage``'s credentials; a failed
    /// check is repeated a minute later at the earliest. Turn it off only for a server you have checked
    /// yourself. The default is `true`.
    public var verifiesConfinement: Bool = true
    /// The operations devices may do. Leave out ``PresignedOperation/Kind/delete`` for storage that only
    /// grows. The default is all of them.
    public var allowedOperations: Set<PresignedOperation.Kind> = Set(PresignedOperation.Kind.allCases)
    /// Whether every upload is create-only (a signed `If-None-Match: *`), whatever the device asks. The
    /// default is `true`.
    public var requiresCreateOnly: Bool = true
    /// The signing date (tests pass their own). The default is `Date()`.
    public var now: @Sendable () -> Date = { Date() }

    let credentials: CredentialsCache
    let uploadCredentialsCache: CredentialsCache
    let signer: SigV4Signer
    /// The requests the issuer sends itself (existence checks, the confinement check), shared by the copies
    /// ``forUser(prefix:)`` makes.
    let server: IssuerServer

    /// S3's largest object: 5 TiB.
    public static let largestObjectSize: Int64 = 5 * 1024 * 1024 * 1024 * 1024

    /// Creates an issuer.
    ///
    /// - Parameters:
    ///   - storage: The S3 server, bucket, key prefix and credentials to sign with.
    ///   - maxObjectSize: The largest object a device may upload, 1 byte to 5 TiB.
    ///   - uploadCredentials: The credentials to sign uploads with, or `nil` for `storage.credentials`. The
    ///     default is `nil`.
    ///   - transport: The HTTP client library the issuer's own checks are sent with (a `HEAD` before a
    ///     multipart upload, the confinement check).
    /// - Throws: `invalidConfiguration` naming the first option out of range.
    public init(
        storage: S3RemoteStorage.Configuration, maxObjectSize: Int64,
        uploadCredentials: S3RemoteStorage.CredentialsProvider? = nil, transport: RemoteTransport
    ) throws {
        try storage.validate()
        guard (1...Self.largestObjectSize).contains(maxObjectSize) else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "maxObjectSize must be 1 byte to 5 TiB, not \(maxObjectSize)", name: "maxObjectSize")
        }
        self.storage = storage
        self.maxObjectSize = maxObjectSize
        let mebibyte: Int64 = 1024 * 1024
        let needed = (maxObjectSize + S3RemoteStorage.maximumPartCount - 1) / S3RemoteStorage.maximumPartCount
        maxPartSize = max(16 * mebibyte, (needed + mebibyte - 1) / mebibyte * mebibyte)
        credentials = CredentialsCache(
            provider: storage.credentials, refreshMargin: storage.credentialsRefreshMargin)
        self.uploadCredentials = uploadCredentials ?? storage.credentials
        uploadCredentialsCache = CredentialsCache(
            provider: self.uploadCredentials, refreshMargin: storage.credentialsRefreshMargin)
        signer = SigV4Signer(region: storage.region)
        server = IssuerServer(storage: storage, uploadCredentials: self.uploadCredentials, transport: transport)
    }

    /// Shuts down the HTTP client the issuer sends its own checks with (one for all the copies
    /// ``forUser(prefix:)`` made); an issuer dropped without it shuts it down in the background.
    public func shutdown() async throws {
        try await server.shutdown()
    }

    /// The same issuer for objects under `prefix` appended to the configured key prefix: one user's or one
    /// tenant's "folder".
    ///
    /// - Throws: `invalidName` for a prefix that is empty, does not end with `/`, or has an empty, `.` or `..`
    ///   component or a control character.
    public func forUser(prefix: String) throws -> PresignedURLIssuer {
        let components = prefix.split(separator: "/", omittingEmptySubsequences: false).dropLast()
        guard prefix.hasSuffix("/"), !components.isEmpty,
            components.allSatisfy({ !$0.isEmpty && $0 != "." && $0 != ".." && !Self.hasControlCharacters($0) })
        else {
            throw AttachmentError(
                code: .invalidName,
                message: "\(String(reflecting: prefix)) is not a key prefix: use non-empty path components, each "
                    + "followed by /", name: prefix)
        }
        var issuer = self
        issuer.storage.keyPrefix += prefix
        return issuer
    }

    /// Checks `operation` against the limits and answers it with a presigned URL, the headers the device must
    /// send with it, and its expiry.
    ///
    /// - Throws: `invalidName` for a filename outside the rules; `accessDenied` naming the value for an
    ///   operation not allowed, a size over a limit, a missing size or part number, or a malformed checksum,
    ///   upload id or marker, and for a multipart upload started or completed over an existing object;
    ///   `invalidConfiguration` for an upload while the confinement check (``verifiesConfinement``) found that
    ///   upload URLs can copy objects in or make them public; `remoteUnavailable` when the server could not
    ///   be asked; what the credentials provider throws.
    public func authorize(_ operation: PresignedOperation) async throws -> PresignedAuthorization {
        let signed = try check(operation)
        let kind = operation.kind
        let key = storage.keyPrefix + operation.filename
        if verifiesConfinement, kind.isUpload, kind != .abortMultipartUpload {
            try await server.confinement.require { try await self.probeConfinement() }
        }
        if requiresCreateOnly, kind == .createMultipartUpload || kind == .completeMultipartUpload,
            try await server.existingObject(key: key) != nil
        {
            throw AttachmentError(
                code: .accessDenied,
                message: "\(kind.rawValue) of \(String(reflecting: operation.filename)) refused: an object is "
                    + "stored under the name, and uploads never replace one",
                name: operation.filename)
        }
        let lifetime = kind == .completeMultipartUpload ? min(expiresIn, completeExpiresIn) : expiresIn
        return try await presign(
            method: kind.method, key: key, query: signed.query, headers: signed.headers,
            credentials: kind.isUpload ? uploadCredentialsCache : credentials, lifetime: lifetime)
    }

    /// A presigned URL for `key` with the headers to send exactly, signed with `credentials`.
    func presign(
        method: String, key: String, query: [(name: String, value: String)], headers: [(name: String, value: String)],
        credentials: CredentialsCache, lifetime: Duration
    ) async throws -> PresignedAuthorization {
        let target = storage.target(key: key)
        let date = now()
        let presigned = try signer.presign(
            SigV4Signer.Request(
                method: method, path: target.path, query: query, headers: [("host", target.host)] + headers),
            credentials: try await credentials.current(), date: date, expiresIn: lifetime)
        guard
            let url = URL(string: "\(target.scheme)://\(target.host)\(presigned.encodedPath)?\(presigned.encodedQuery)")
        else {
            throw AttachmentError(
                code: .invalidConfiguration, message: "cannot form a presigned URL for \(String(reflecting: key))",
                name: key)
        }
        let (seconds, attoseconds) = lifetime.components
        return PresignedAuthorization(
            url: url, headers: Dictionary(headers, uniquingKeysWith: { first, _ in first }),
            expiresAt: date.addingTimeInterval(TimeInterval(seconds) + TimeInterval(attoseconds) / 1e18))
    }

    /// The query parameters and headers to sign for `operation`, after checking it.
    func check(_ operation: PresignedOperation) throws -> (
        query: [(name: String, value: String)], headers: [(name: String, value: String)]
    ) {
        let kind = operation.kind
        func refuse(_ reason: String, _ name: String) -> AttachmentError {
            AttachmentError(
                code: .accessDenied,
                message: "\(kind.rawValue) of \(String(reflecting: operation.filename)) refused: \(reason)",
                name: name)
        }
        func required<T>(_ value: T?, _ name: String) throws -> T {
            guard let value else { throw refuse("it has no \(name)", name) }
            return value
        }
        guard allowedOperations.contains(kind) else {
            throw refuse("\(kind.rawValue) is not an allowed operation", kind.rawValue)
        }
        try checkFilename(operation.filename)
        var query: [(name: String, value: String)] = []
        var headers: [(name: String, value: String)] = []
        func addContentHeaders() throws {
            if let md5 = operation.contentMD5 {
                guard let digest = Data(base64Encoded: md5), digest.count == 16 else {
                    throw refuse("contentMD5 \(String(reflecting: md5)) is not a base64 MD5", "contentMD5")
                }
                headers.append(("content-md5", md5))
            }
        }
        func addObjectHeaders() throws {
            if let sha256 = operation.sha256 {
                guard let valid = validSHA256(sha256) else {
                    throw refuse("sha256 \(String(reflecting: sha256)) is not a SHA-256 in hex", "sha256")
                }
                headers.append((S3RemoteStorage.sha256MetadataHeader, valid))
            }
            if let contentType = operation.contentType {
                guard !contentType.isEmpty, contentType.utf8.count <= 255, !Self.hasControlCharacters(contentType)
                else {
                    throw refuse("contentType \(String(reflecting: contentType)) is not a media type", "contentType")
                }
                headers.append(("content-type", contentType))
            }
        }
        func uploadId() throws -> String {
            let id = try required(operation.uploadId, "uploadId")
            guard !id.isEmpty, id.utf8.count <= 1024, !Self.hasControlCharacters(id) else {
                throw refuse("uploadId \(String(reflecting: id)) is not an upload id", "uploadId")
            }
            return id
        }
        switch kind {
        case .get:
            if let start = operation.rangeStart, start < 0 {
                throw refuse("rangeStart \(start) is negative", "rangeStart")
            }
        case .head, .delete:
            break
        case .put:
            let length = try required(operation.contentLength, "contentLength")
            guard (0...maxObjectSize).contains(length) else {
                throw refuse("contentLength \(length) is over the \(maxObjectSize) bytes allowed", "contentLength")
            }
            headers.append(("content-length", String(length)))
            try addContentHeaders()
            try addObjectHeaders()
            if requiresCreateOnly || operation.createOnly == true {
                headers.append(("if-none-match", "*"))
            }
            if let cannedACL { headers.append(("x-amz-acl", cannedACL)) }
        case .createMultipartUpload:
            let size = try required(operation.objectSize, "objectSize")
            guard (1...maxObjectSize).contains(size) else {
                throw refuse("objectSize \(size) is over the \(maxObjectSize) bytes allowed", "objectSize")
            }
            query.append(("uploads", ""))
            try addObjectHeaders()
            if let cannedACL { headers.append(("x-amz-acl", cannedACL)) }
        case .uploadPart:
            let id = try uploadId()
            let number = try required(operation.partNumber, "partNumber")
            guard (1...Int(S3RemoteStorage.maximumPartCount)).contains(number) else {
                throw refuse("partNumber \(number) is not 1 to 10000", "partNumber")
            }
            let length = try required(operation.contentLength, "contentLength")
            let before = Int64(number - 1) * S3RemoteStorage.Configuration.minimumPartSize
            guard length >= 1, length <= maxPartSize, before + length <= maxObjectSize else {
                throw refuse(
                    "part \(number) of \(length) bytes is over the \(maxPartSize) bytes a part may have or the "
                        + "\(maxObjectSize) bytes an object may have", "contentLength")
            }
            query += [("partNumber", String(number)), ("uploadId", id)]
            headers.append(("content-length", String(length)))
            try addContentHeaders()
        case .listParts:
            query += [("max-parts", "1000"), ("uploadId", try uploadId())]
            if let marker = operation.partNumberMarker {
                guard !marker.isEmpty, marker.count <= 5, marker.allSatisfy({ $0.isASCII && $0.isNumber }) else {
                    throw refuse(
                        "partNumberMarker \(String(reflecting: marker)) is not a part number", "partNumberMarker")
                }
                query.append(("part-number-marker", marker))
            }
        case .completeMultipartUpload:
            query.append(("uploadId", try uploadId()))
            if requiresCreateOnly { headers.append(("if-none-match", "*")) }
        case .abortMultipartUpload:
            query.append(("uploadId", try uploadId()))
        }
        return (query, headers)
    }

    /// Throws `invalidName` unless `filename` names one object directly under the key prefix.
    private func checkFilename(_ filename: String) throws {
        guard !filename.isEmpty, filename != ".", filename != "..", !filename.contains("/"), !filename.contains("\\"),
            !Self.hasControlCharacters(filename), storage.keyPrefix.utf8.count + filename.utf8.count <= 1024
        else {
            throw AttachmentError(
                code: .invalidName,
                message: "\(String(reflecting: filename)) is not a filename a device may use: no /, \\, control "
                    + "characters, . or .., and at most 1024 bytes with the key prefix", name: filename)
        }
    }

    /// Whether `text` has a C0 control character or DEL (a header or key that could be split or hidden).
    static func hasControlCharacters(_ text: some StringProtocol) -> Bool {
        text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }
}
