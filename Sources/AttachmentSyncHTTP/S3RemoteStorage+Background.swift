import AttachmentSync
import Foundation

extension S3RemoteStorage: BackgroundTransferForming {
    /// How long a request formed for a background transfer stays valid when this adapter signs it: 24 hours.
    /// The system may start a background transfer long after it was handed over; one that starts later
    /// is refused (403) and formed again.
    public static let backgroundRequestLifetime: Duration = .seconds(24 * 3600)

    /// A `PutObject` of the whole file, presigned with its `Content-MD5` (the server checks the body), its
    /// SHA-256 as `x-amz-meta-sha256` and, when ``Configuration/createOnly``, `If-None-Match: *`; `nil` for a
    /// file above ``Configuration/multipartThreshold`` (a multipart upload is made in-process).
    ///
    /// - Throws: `integrityMismatch` when the file is not the content `Attachment.contentHash` says.
    public func backgroundUploadRequest(for attachment: Attachment, fileURL: URL) async throws -> PreparedRequest? {
        let key = try objectKey(for: attachment)
        let size = try transport.files.size(ofFileAt: fileURL.path)
        guard size <= configuration.multipartThreshold else { return nil }
        let digests = try await PayloadDigests.of(fileAt: fileURL, offset: 0, length: size, files: transport.files)
        try Self.checkContent(digests.sha256, of: attachment, key: key)
        var request = S3Request(
            method: .put, key: key, headers: uploadHeaders(attachment, md5: digests.md5, sha256: digests.sha256),
            body: .file(fileURL, offset: 0, length: size) { _ in }, payload: .unsigned, operation: "PutObject")
        if configuration.createOnly { request.headers.append(("if-none-match", "*")) }
        return try await prepared(request, attachmentId: attachment.id)
    }

    /// ``Configuration/multipartThreshold``: a larger file is uploaded in parts, in-process.
    public var largestBackgroundUpload: Int64? { configuration.multipartThreshold }

    /// A `GetObject`, presigned.
    public func backgroundDownloadRequest(for attachment: Attachment) async throws -> PreparedRequest? {
        let request = S3Request(method: .get, key: try objectKey(for: attachment), operation: "GetObject")
        return try await prepared(request, attachmentId: attachment.id)
    }

    /// The object's size and stored SHA-256, from a `HEAD` (``fileInfo(attachment:)``).
    public func storedObject(for attachment: Attachment) async throws -> RemoteObjectInfo? {
        try await fileInfo(attachment: attachment)
    }

    private func prepared(_ request: S3Request, attachmentId: String) async throws -> PreparedRequest {
        let authorized = try await authorizer.prepare(request, lifetime: Self.backgroundRequestLifetime)
        guard let url = URL(string: authorized.url) else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "cannot form a URL for \(request.operation) of "
                    + String(reflecting: request.key ?? ""), attachmentId: attachmentId, name: request.key)
        }
        return PreparedRequest(
            method: request.method.rawValue, url: url,
            headers: authorized.headers.map { PreparedRequest.Header(name: $0.name, value: $0.value) })
    }
}

extension PresignedRemoteStorage: BackgroundTransferForming {
    /// A single upload authorised by the backend (its URL's lifetime is the backend's), or `nil` for a file
    /// above ``Configuration/multipartThreshold``.
    public func backgroundUploadRequest(for attachment: Attachment, fileURL: URL) async throws -> PreparedRequest? {
        try await storage.backgroundUploadRequest(for: attachment, fileURL: fileURL)
    }

    /// ``Configuration/multipartThreshold``: a larger file is uploaded in parts, in-process.
    public var largestBackgroundUpload: Int64? { storage.largestBackgroundUpload }

    /// A download authorised by the backend.
    public func backgroundDownloadRequest(for attachment: Attachment) async throws -> PreparedRequest? {
        try await storage.backgroundDownloadRequest(for: attachment)
    }

    /// The object's size and stored SHA-256, from a `HEAD` the backend authorises.
    public func storedObject(for attachment: Attachment) async throws -> RemoteObjectInfo? {
        try await storage.storedObject(for: attachment)
    }
}
