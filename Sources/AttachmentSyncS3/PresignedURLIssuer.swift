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
/// - **No replacing**: uploads carry a signed `If-None-Match: *` when ``requiresCreateOnly`` (the default):
///   a device cannot overwrite an object, whatever it asks.
/// - **Integrity**: the `Content-MD5` and the SHA-256 the device declares are signed, so the server checks
///   the body against the MD5 and stores that SHA-256 for every download to check.
///
/// Refusals throw ``AttachmentSync/AttachmentError`` (`accessDenied` or `invalidName`, naming the offending
/// value): answer them with HTTP 403 and have the device's closure throw ``PresignedRemoteStorage/Denied``.
///
/// ```swift
/// // On the server, once:
/// let issuer = try PresignedURLIssuer(
///     storage: .init(endpoint: s3Endpoint, region: "eu-west-1", bucket: "app-files", credentials: .environment),
///     maxObjectSize: 200 * 1024 * 1024)
/// // In the route that answers POST /attachments/authorize, for a signed-in user:
/// let authorization = try await issuer.forUser(prefix: "users/\(user.id)/").authorize(operation)
/// ```
public struct PresignedURLIssuer: Sendable {
    /// The server, bucket, key prefix and credentials the URLs are signed for (the other options of the
    /// configuration are not used).
    public private(set) var storage: S3RemoteStorage.Configuration
    /// The largest object a device may upload, in bytes.
    public var maxObjectSize: Int64
    /// The largest part of a multipart upload, in bytes. The default is 16 MiB, raised to what a file of
    /// ``maxObjectSize`` needs to fit S3's 10,000 parts.
    public var maxPartSize: Int64
    /// How long each URL works, 1 second to 7 days. The default is 15 minutes.
    public var expiresIn: Duration = .seconds(900)
    /// The operations devices may do. Leave out ``PresignedOperation/Kind/delete`` for storage that only
    /// grows. The default is all of them.
    public var allowedOperations: Set<PresignedOperation.Kind> = Set(PresignedOperation.Kind.allCases)
    /// Whether every upload is create-only (a signed `If-None-Match: *`), whatever the device asks. The
    /// default is `true`.
    public var requiresCreateOnly: Bool = true
    /// The signing date (tests pass their own). The default is `Date()`.
    public var now: @Sendable () -> Date = { Date() }

    private let credentials: CredentialsCache
    private let signer: SigV4Signer

    /// S3's largest object: 5 TiB.
    public static let largestObjectSize: Int64 = 5 * 1024 * 1024 * 1024 * 1024

    /// Creates an issuer.
    ///
    /// - Parameters:
    ///   - storage: The S3 server, bucket, key prefix and credentials to sign with.
    ///   - maxObjectSize: The largest object a device may upload, 1 byte to 5 TiB.
    /// - Throws: `invalidConfiguration` naming the first option out of range.
    public init(storage: S3RemoteStorage.Configuration, maxObjectSize: Int64) throws {
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
        signer = SigV4Signer(region: storage.region)
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
    ///   upload id or marker; what the credentials provider throws.
    public func authorize(_ operation: PresignedOperation) async throws -> PresignedAuthorization {
        let signed = try check(operation)
        let key = storage.keyPrefix + operation.filename
        let target = storage.target(key: key)
        let date = now()
        let presigned = try signer.presign(
            SigV4Signer.Request(
                method: operation.kind.method, path: target.path, query: signed.query,
                headers: [("host", target.host)] + signed.headers),
            credentials: try await credentials.current(), date: date, expiresIn: expiresIn)
        guard
            let url = URL(string: "\(target.scheme)://\(target.host)\(presigned.encodedPath)?\(presigned.encodedQuery)")
        else {
            throw AttachmentError(
                code: .invalidConfiguration, message: "cannot form a presigned URL for \(String(reflecting: key))",
                name: key)
        }
        let (seconds, attoseconds) = expiresIn.components
        return PresignedAuthorization(
            url: url, headers: Dictionary(signed.headers, uniquingKeysWith: { first, _ in first }),
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
        case .createMultipartUpload:
            let size = try required(operation.objectSize, "objectSize")
            guard (1...maxObjectSize).contains(size) else {
                throw refuse("objectSize \(size) is over the \(maxObjectSize) bytes allowed", "objectSize")
            }
            query.append(("uploads", ""))
            try addObjectHeaders()
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
        case .completeMultipartUpload, .abortMultipartUpload:
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
    private static func hasControlCharacters(_ text: some StringProtocol) -> Bool {
        text.unicodeScalars.contains { $0.value < 0x20 || $0.value == 0x7F }
    }
}
