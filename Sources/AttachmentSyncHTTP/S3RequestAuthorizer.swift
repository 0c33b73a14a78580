import AttachmentSync
import Foundation

/// How ``S3RemoteStorage`` gets each request authorised: the one thing that differs between an adapter that
/// holds credentials and signs (``SigV4RequestAuthorizer``) and one that sends every request to a URL the
/// app's backend presigned for it (``PresignedRequestAuthorizer``, behind ``PresignedRemoteStorage``).
///
/// The adapter builds each request (key, query, headers, body, checksums) the same way whichever authorizer
/// it has, asks the authorizer for the URL and headers to send it with, and sends it. When the server
/// refuses it (401 or 403) it tells the authorizer, and sends it once more with a renewed authorisation if
/// the authorizer renews refused ones. Nothing else in the adapter asks how requests are authorised.
protocol S3RequestAuthorizer: Sendable {
    /// Whether a request the server refuses (401 or 403) is sent once more, with an authorisation from
    /// ``authorize(_:renewing:)`` with `renewing` set; the answer to that second try is final.
    var renewsRefusedRequests: Bool { get }

    /// Whether a large download may be split into ranged `GET`s sent at once (each one authorised on its
    /// own).
    var splitsDownloads: Bool { get }

    /// The URL and headers to send `request` with. `renewing` is set when the server refused the previous
    /// authorisation of the same request.
    ///
    /// - Throws: `accessDenied` when no authorisation can be had (credentials or a backend that refuse),
    ///   `unsupported` for a request this way of authorising cannot make, and what getting it throws.
    func authorize(_ request: S3Request, renewing: Bool) async throws -> AuthorizedS3Request

    /// The server refused `request` (401 or 403, or an S3 error code meaning bad credentials) as it was
    /// authorised; `retrying` is set when it is about to be sent again with a renewed authorisation.
    func refused(_ request: S3Request, retrying: Bool) async

    /// The URL and headers to send `request` with from another process, later (a background transfer
    /// service): valid for `lifetime` or what the backend gives, and not renewed. The body is unsigned
    /// (its `Content-MD5` and stored SHA-256 headers are signed).
    func prepare(_ request: S3Request, lifetime: Duration) async throws -> AuthorizedS3Request

    /// A URL that makes `method` on the object `key` without credentials until it expires; `attachmentId` is
    /// for the error.
    ///
    /// - Throws: `unsupported` when this authorizer holds no credentials to presign with;
    ///   `invalidConfiguration` for an expiry out of range.
    func presignedURL(
        key: String, method: S3RemoteStorage.PresignedMethod, expiresIn: Duration, attachmentId: String?
    ) async throws -> URL
}

/// Where and with which headers to send one request: everything an HTTP client needs besides the method
/// and the body, fully formed in advance.
struct AuthorizedS3Request: Sendable {
    /// The request's whole URL, signature or presigned query included (a credential: never logged).
    var url: String
    /// The headers to send, in order; `Host` and the body's length are left to the HTTP client.
    var headers: [(name: String, value: String)]
}

/// Signs every request with AWS Signature Version 4, with the adapter's credentials, dated by its
/// ``S3RemoteStorage/Configuration/now``.
///
/// A refusal drops cached credentials (the next request asks the provider again) and is final: a request
/// signed with fresh credentials would be signed the same way.
struct SigV4RequestAuthorizer: S3RequestAuthorizer {
    let configuration: S3RemoteStorage.Configuration
    let signer: SigV4Signer
    let credentials: CredentialsCache

    init(configuration: S3RemoteStorage.Configuration) {
        self.configuration = configuration
        signer = SigV4Signer(region: configuration.region)
        credentials = CredentialsCache(
            provider: configuration.credentials, refreshMargin: configuration.credentialsRefreshMargin,
            now: configuration.now)
    }

    var renewsRefusedRequests: Bool { false }

    var splitsDownloads: Bool { true }

    func authorize(_ request: S3Request, renewing: Bool) async throws -> AuthorizedS3Request {
        let credentials = try await credentials.current()
        let target = configuration.target(key: request.key)
        let signed = signer.sign(
            SigV4Signer.Request(
                method: request.method.rawValue, path: target.path, query: request.query,
                headers: [("host", target.host)] + request.headers),
            payload: request.payload, credentials: credentials, date: configuration.now())
        let query = signed.encodedQuery.isEmpty ? "" : "?" + signed.encodedQuery
        return AuthorizedS3Request(
            url: "\(target.scheme)://\(target.host)\(signed.encodedPath)\(query)", headers: signed.headers)
    }

    func refused(_ request: S3Request, retrying: Bool) async {
        await credentials.invalidate()
    }

    /// A URL presigned in the query (its headers signed with it), so no later signing is needed.
    func prepare(_ request: S3Request, lifetime: Duration) async throws -> AuthorizedS3Request {
        let target = configuration.target(key: request.key)
        let presigned = try signer.presign(
            SigV4Signer.Request(
                method: request.method.rawValue, path: target.path, query: request.query,
                headers: [("host", target.host)] + request.headers),
            credentials: try await credentials.current(), date: configuration.now(), expiresIn: lifetime)
        return AuthorizedS3Request(
            url: "\(target.scheme)://\(target.host)\(presigned.encodedPath)?\(presigned.encodedQuery)",
            headers: request.headers)
    }

    func presignedURL(
        key: String, method: S3RemoteStorage.PresignedMethod, expiresIn: Duration, attachmentId: String?
    ) async throws -> URL {
        let target = configuration.target(key: key)
        let credentials = try await credentials.current()
        let presigned = try signer.presign(
            SigV4Signer.Request(method: method.rawValue, path: target.path, headers: [("host", target.host)]),
            credentials: credentials, date: configuration.now(), expiresIn: expiresIn)
        let text = "\(target.scheme)://\(target.host)\(presigned.encodedPath)?\(presigned.encodedQuery)"
        guard let url = URL(string: text) else {
            throw AttachmentError(
                code: .invalidConfiguration, message: "cannot form a presigned URL for \(String(reflecting: key))",
                attachmentId: attachmentId, name: key)
        }
        return url
    }
}
