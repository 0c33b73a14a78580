import AttachmentSync
import Foundation
import Logging

/// Sends every request to the URL the app's backend presigned for it (``PresignedRemoteStorage``'s
/// ``PresignedRemoteStorage/Configuration/authorize`` closure, through the ``PresignedAuthorizations``
/// cache), with the authorisation's headers and the request's own headers that are not `x-amz-` ones: those
/// must be signed, so only the backend's count.
///
/// A 401 or 403 (an expired or revoked URL, a clock too far off) drops the authorisation and asks for a new
/// one, once; the answer to the second try is final. Large downloads are not split: the backend makes one
/// download URL at a time. It holds no credentials, so it presigns no URLs of its own.
struct PresignedRequestAuthorizer: S3RequestAuthorizer {
    let authorizations: PresignedAuthorizations
    let logger: Logger

    /// Headers the HTTP client sets itself from the URL and the body.
    static let transportHeaders: Set<String> = ["host", "content-length", "transfer-encoding", "connection"]

    var renewsRefusedRequests: Bool { true }

    var splitsDownloads: Bool { false }

    func authorize(_ request: S3Request, renewing: Bool) async throws -> AuthorizedS3Request {
        let authorization = try await authorizations.authorization(
            for: try PresignedOperation(request), renewing: renewing)
        var headers: [(name: String, value: String)] = []
        let signedNames = Set(authorization.headers.keys.map { $0.lowercased() })
        for (name, value) in authorization.headers.sorted(by: { $0.key < $1.key })
        where !Self.transportHeaders.contains(name.lowercased()) {
            headers.append((name, value))
        }
        for (name, value) in request.headers {
            let lowercased = name.lowercased()
            guard !lowercased.hasPrefix("x-amz-"), !signedNames.contains(lowercased),
                !Self.transportHeaders.contains(lowercased)
            else { continue }
            headers.append((name, value))
        }
        return AuthorizedS3Request(url: authorization.url.absoluteString, headers: headers)
    }

    /// Forgets the refused authorisation before asking for a new one; after the final try it is left as it
    /// is (it expires, or the next refusal drops it).
    func refused(_ request: S3Request, retrying: Bool) async {
        guard retrying, let operation = try? PresignedOperation(request) else { return }
        logger.debug(
            "the server refused a presigned URL; asking the backend for a new one",
            metadata: ["operation": "\(request.operation)", "object": "\(request.key ?? "")"])
        await authorizations.invalidate(operation)
    }

    /// The backend's authorisation, as for a request sent now: its lifetime is the backend's choice.
    func prepare(_ request: S3Request, lifetime: Duration) async throws -> AuthorizedS3Request {
        try await authorize(request, renewing: false)
    }

    func presignedURL(
        key: String, method: S3RemoteStorage.PresignedMethod, expiresIn: Duration, attachmentId: String?
    ) async throws -> URL {
        throw AttachmentError(
            code: .unsupported, message: "PresignedRemoteStorage holds no credentials to presign URLs with",
            attachmentId: attachmentId, name: key)
    }
}

extension PresignedOperation {
    /// The operation a request of the S3 adapter stands for, with the facts a backend checks.
    ///
    /// - Throws: `unsupported` for a request a presigning backend is not asked for (listing the bucket,
    ///   creating it).
    init(_ request: S3Request) throws {
        func header(_ name: String) -> String? {
            request.headers.first { $0.name.lowercased() == name }?.value
        }
        func query(_ name: String) -> String? {
            request.query.first { $0.name == name }?.value
        }
        let kind: Kind
        switch request.operation {
        case "PutObject": kind = .put
        case "GetObject": kind = .get
        case "HeadObject": kind = .head
        case "DeleteObject": kind = .delete
        case "CreateMultipartUpload": kind = .createMultipartUpload
        case "UploadPart": kind = .uploadPart
        case "ListParts": kind = .listParts
        case "CompleteMultipartUpload": kind = .completeMultipartUpload
        case "AbortMultipartUpload": kind = .abortMultipartUpload
        default:
            throw AttachmentError(
                code: .unsupported,
                message: "S3 \(request.operation) is not something a presigning backend authorises",
                name: request.key)
        }
        guard let key = request.key else {
            throw AttachmentError(
                code: .unsupported, message: "S3 \(request.operation) names no object", name: request.operation)
        }
        self.init(kind: kind, filename: key)
        switch kind {
        case .put:
            contentLength = request.body.length
            contentMD5 = header("content-md5")
            sha256 = header(S3RemoteStorage.sha256MetadataHeader)
            contentType = header("content-type")
            createOnly = header("if-none-match") == "*"
        case .get:
            rangeStart = header("range").flatMap { range in
                range.hasPrefix("bytes=") && range.hasSuffix("-")
                    ? Int64(range.dropFirst("bytes=".count).dropLast()) : nil
            }
        case .createMultipartUpload:
            objectSize = request.objectSize
            sha256 = header(S3RemoteStorage.sha256MetadataHeader)
            contentType = header("content-type")
        case .uploadPart:
            uploadId = query("uploadId")
            partNumber = query("partNumber").flatMap { Int($0) }
            contentLength = request.body.length
            contentMD5 = header("content-md5")
        case .listParts:
            uploadId = query("uploadId")
            partNumberMarker = query("part-number-marker")
        case .completeMultipartUpload, .abortMultipartUpload:
            uploadId = query("uploadId")
        case .head, .delete:
            break
        }
    }
}
