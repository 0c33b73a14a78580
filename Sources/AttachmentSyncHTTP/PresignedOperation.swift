import AttachmentSync
import Foundation

/// One request ``PresignedRemoteStorage`` needs your backend to authorise: what it will do to which file,
/// with the facts the backend needs to check it (sizes, checksums, the multipart upload and part).
///
/// It is `Codable`, so the app can send it to its backend as JSON as it is, and `Hashable`: the adapter
/// reuses an authorisation for an equal operation until shortly before it expires. The backend half,
/// ``PresignedURLIssuer``, answers it with a presigned URL.
///
/// Only the fields of the operation's ``kind`` are set; the others are `nil`.
public struct PresignedOperation: Sendable, Hashable, Codable, CustomStringConvertible {
    /// What the request does.
    public enum Kind: String, Sendable, Hashable, Codable, CaseIterable {
        /// Download the file (`GET`), from ``PresignedOperation/rangeStart`` on when set.
        case get
        /// Read the file's size and stored SHA-256 without its content (`HEAD`).
        case head
        /// Upload the file in one request (`PUT`) of ``PresignedOperation/contentLength`` bytes.
        case put
        /// Delete the file (`DELETE`).
        case delete
        /// Start a multipart upload of a file of ``PresignedOperation/objectSize`` bytes (`POST ?uploads`).
        case createMultipartUpload
        /// Upload part ``PresignedOperation/partNumber`` of ``PresignedOperation/uploadId`` (`PUT`).
        case uploadPart
        /// List the parts of ``PresignedOperation/uploadId`` the server holds, to resume it (`GET`).
        case listParts
        /// Complete ``PresignedOperation/uploadId`` from its parts (`POST`).
        case completeMultipartUpload
        /// Abort ``PresignedOperation/uploadId`` and drop its parts (`DELETE`).
        case abortMultipartUpload

        /// The HTTP method the request is sent with.
        public var method: String {
            switch self {
            case .get, .listParts: "GET"
            case .head: "HEAD"
            case .put, .uploadPart: "PUT"
            case .delete, .abortMultipartUpload: "DELETE"
            case .createMultipartUpload, .completeMultipartUpload: "POST"
            }
        }
    }

    /// What the request does.
    public var kind: Kind
    /// The attachment's `Attachment.filename`. The backend decides the object key it maps to
    /// (its prefix for this user, say); the device never names a key.
    public var filename: String
    /// The body's exact length in bytes, for ``Kind/put`` and ``Kind/uploadPart``.
    public var contentLength: Int64?
    /// The body's MD5, base64 (the `Content-MD5` header the device sends), for ``Kind/put`` and
    /// ``Kind/uploadPart``.
    public var contentMD5: String?
    /// The whole file's SHA-256 (lowercase hex), stored with the object as `x-amz-meta-sha256`, for
    /// ``Kind/put`` and ``Kind/createMultipartUpload`` (when known).
    public var sha256: String?
    /// The file's media type, for ``Kind/put`` and ``Kind/createMultipartUpload`` (when known).
    public var contentType: String?
    /// Whether the upload must not replace an existing object (`If-None-Match: *`), for ``Kind/put``.
    public var createOnly: Bool?
    /// The whole file's size, for ``Kind/createMultipartUpload``.
    public var objectSize: Int64?
    /// The multipart upload's id, for the multipart kinds after ``Kind/createMultipartUpload``.
    public var uploadId: String?
    /// The part's number, 1 to 10,000, for ``Kind/uploadPart``.
    public var partNumber: Int?
    /// Where a ``Kind/listParts`` page starts (the previous page's last part number), or `nil` for the
    /// first page.
    public var partNumberMarker: String?
    /// The first byte a ``Kind/get`` asks for (a resumed download sends `Range: bytes=N-`), or `nil` for the
    /// whole file. Information for the backend: the range header is sent unsigned.
    public var rangeStart: Int64?

    /// Creates an operation of `kind` on `filename` with no other field set; the adapter fills in the
    /// fields of each kind.
    public init(kind: Kind, filename: String) {
        self.kind = kind
        self.filename = filename
    }

    /// The kind and filename, and the fields that are set; never anything secret (there is nothing secret in
    /// an operation).
    public var description: String {
        var parts = ["\(kind.rawValue) \(String(reflecting: filename))"]
        if let contentLength { parts.append("\(contentLength) bytes") }
        if let objectSize { parts.append("object \(objectSize) bytes") }
        if let partNumber { parts.append("part \(partNumber)") }
        if let rangeStart { parts.append("from byte \(rangeStart)") }
        if createOnly == true { parts.append("create-only") }
        return "PresignedOperation(" + parts.joined(separator: ", ") + ")"
    }
}

/// Your backend's answer to a ``PresignedOperation``: the URL to send the request to and the headers to send
/// with it, until it expires.
///
/// The URL is a credential (its query holds a signature, and a session token for temporary keys): its
/// `description` leaves the query out, and the adapter never logs it or puts it in an error.
public struct PresignedAuthorization: Sendable, Hashable, Codable, CustomStringConvertible {
    /// The URL to send the request to, query included.
    public var url: URL
    /// Headers the request must carry exactly as given (those covered by the signature: `content-length`,
    /// `content-md5`, `x-amz-meta-sha256`, `if-none-match`…), by lowercase name. The adapter sends its own
    /// other headers (`range`, `if-match`, `content-type`…) beside them, but never an `x-amz-` header the
    /// authorisation does not list. The default is none.
    public var headers: [String: String]
    /// When the URL stops working. The adapter asks again shortly before (see
    /// ``PresignedRemoteStorage/Configuration/renewalMargin``), and at once when the server refuses it.
    public var expiresAt: Date

    /// Creates an authorisation.
    ///
    /// - Parameters:
    ///   - url: The presigned URL.
    ///   - headers: The headers to send exactly as given. The default is none.
    ///   - expiresAt: When the URL stops working.
    public init(url: URL, headers: [String: String] = [:], expiresAt: Date) {
        self.url = url
        self.headers = headers
        self.expiresAt = expiresAt
    }

    /// The URL without its query (`https://host/bucket/key?<redacted>`), the header names and the expiry.
    public var description: String {
        "PresignedAuthorization(url: \(Self.redacted(url)), headers: \(headers.keys.sorted()), "
            + "expiresAt: \(expiresAt))"
    }

    /// `url` without its query, fragment or user info: what may be shown of a presigned URL.
    static func redacted(_ url: URL) -> String {
        guard var components = URLComponents(url: url, resolvingAgainstBaseURL: false) else { return "<url>" }
        let hadQuery = components.query != nil
        components.query = nil
        components.fragment = nil
        components.user = nil
        components.password = nil
        return (components.string ?? "<url>") + (hadQuery ? "?<redacted>" : "")
    }
}
