import AsyncHTTPClient
import AttachmentSync
import Foundation
import NIOCore
import NIOHTTP1

extension S3RemoteStorage {
    /// Sends a request to the URL the backend authorised for it, with the authorisation's headers and the
    /// request's own headers that are not `x-amz-` ones (those must be signed, so only the backend's count).
    ///
    /// A 401 or 403 (an expired or revoked URL, a clock too far off) drops the authorisation and asks for a
    /// new one, once; the answer to the second try is final. A streamed body sent twice reports its progress
    /// once.
    func sendPresigned(
        _ s3Request: S3Request, with authorizations: PresignedAuthorizations, attachmentId: String?,
        accepts: @escaping (HTTPResponseStatus) -> Bool
    ) async throws -> HTTPClientResponse {
        let operation = try PresignedOperation(s3Request)
        let request = s3Request.reportingProgressOnce()
        var renewing = false
        while true {
            let authorization = try await authorizations.authorization(for: operation, renewing: renewing)
            var httpRequest = HTTPClientRequest(url: authorization.url.absoluteString)
            httpRequest.method = request.request.method
            let signedNames = Set(authorization.headers.keys.map { $0.lowercased() })
            for (name, value) in authorization.headers.sorted(by: { $0.key < $1.key })
            where !Self.transportHeaders.contains(name.lowercased()) {
                httpRequest.headers.add(name: name, value: value)
            }
            for (name, value) in request.request.headers {
                let lowercased = name.lowercased()
                guard !lowercased.hasPrefix("x-amz-"), !signedNames.contains(lowercased),
                    !Self.transportHeaders.contains(lowercased)
                else { continue }
                httpRequest.headers.add(name: name, value: value)
            }
            request.startAttempt()
            httpRequest.body = request.request.body.requestBody(for: request.request.method)
            let isFinal = renewing
            let response = try await transport.send(
                httpRequest, event: request.request.event, attachmentId: attachmentId,
                accepts: { accepts($0) || (!isFinal && ($0 == .forbidden || $0 == .unauthorized)) })
            guard !isFinal, response.status == .forbidden || response.status == .unauthorized else {
                return response
            }
            _ = try? await response.body.collect(upTo: HTTPTransport.maxErrorBody)
            configuration.logger.debug(
                "the server refused a presigned URL; asking the backend for a new one",
                metadata: ["operation": "\(s3Request.operation)", "object": "\(s3Request.key ?? "")"])
            await authorizations.invalidate(operation)
            renewing = true
        }
    }

    /// Headers the HTTP client sets itself from the URL and the body.
    static let transportHeaders: Set<String> = ["host", "content-length", "transfer-encoding", "connection"]
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

/// A request whose streamed body may be sent more than once (a presigned URL refused, then renewed): the
/// progress of each attempt is reported only past what an earlier attempt reported, so it never counts a
/// byte twice.
final class ProgressOnceRequest: Sendable {
    let request: S3Request
    private let counts: LockedValue<(reported: Int64, current: Int64)>

    init(_ request: S3Request) {
        let counts = LockedValue<(reported: Int64, current: Int64)>((0, 0))
        self.counts = counts
        guard case .file(let url, let offset, let length, let onChunk) = request.body else {
            self.request = request
            return
        }
        var wrapped = request
        wrapped.body = .file(url, offset: offset, length: length) { count in
            let fresh = counts.withLock { counts -> Int64 in
                counts.current += Int64(count)
                let fresh = max(0, counts.current - counts.reported)
                counts.reported = max(counts.reported, counts.current)
                return fresh
            }
            if fresh > 0 { onChunk(Int(fresh)) }
        }
        self.request = wrapped
    }

    /// Starts counting another attempt from byte 0.
    func startAttempt() {
        counts.withLock { $0.current = 0 }
    }
}

extension S3Request {
    func reportingProgressOnce() -> ProgressOnceRequest {
        ProgressOnceRequest(self)
    }
}
