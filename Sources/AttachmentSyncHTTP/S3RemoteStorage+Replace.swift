import AttachmentSync
import Foundation

extension S3RemoteStorage: ReplaceableRemoteStorage {
    /// The largest object one `PutObject` may carry.
    static let largestSinglePut: Int64 = 5 * 1024 * 1024 * 1024

    /// Replaces the object with the file in one `PutObject` conditional on the object's ETag (`If-Match`),
    /// after a `HEAD` found the object stored with SHA-256 `expectedSHA256`: another writer's change in
    /// between makes the server refuse it (412), and nothing is replaced. The new object carries the
    /// file's SHA-256 (`x-amz-meta-sha256`) as an upload's does.
    ///
    /// Ceph's gateway (16.2) compares `If-Match` with the ETag without its quotes, so a quoted ETag it
    /// refuses is sent once more without them, after a second `HEAD` found the same ETag.
    ///
    /// - Throws: `AttachmentError` with code `conflict` when the object is stored with another SHA-256 (or
    ///   none) or changed meanwhile, `remoteNotFound` when there is none, `integrityMismatch` when the file is
    ///   not the attachment's `contentHash`, `unsupported` above 5 GiB (one request's limit).
    public func replaceFile(fileURL: URL, attachment: Attachment, replacing expectedSHA256: String) async throws {
        let key = try objectKey(for: attachment)
        let size = try transport.files.size(ofFileAt: fileURL.path)
        guard size <= Self.largestSinglePut else {
            throw AttachmentError(
                code: .unsupported,
                message: "replacing \(String(reflecting: key)) with \(size) bytes takes more than one request allows",
                attachmentId: attachment.id, name: key)
        }
        let digests = try await PayloadDigests.of(
            fileAt: fileURL, offset: 0, length: size, md5: configuration.sendsContentMD5, files: transport.files)
        try Self.checkContent(digests.sha256, of: attachment, key: key)
        var previousETag: String?
        for unquoted in [false, true] {
            let etag = try await currentETag(key: key, attachment: attachment, expectedSHA256: expectedSHA256)
            // Unquoted only for the same object a quoted ETag was refused for.
            if unquoted, etag != previousETag { break }
            previousETag = etag
            let condition = unquoted ? etag.trimmingCharacters(in: CharacterSet(charactersIn: "\"")) : etag
            let request = S3Request(
                method: .put, key: key,
                headers: uploadHeaders(attachment, md5: digests.md5, sha256: digests.sha256) + [
                    ("if-match", condition)
                ],
                body: .file(fileURL, offset: 0, length: size) { _ in }, payload: .sha256(digests.sha256),
                operation: "PutObject")
            let response = try await send(request, attachmentId: attachment.id) {
                (200..<300).contains($0.code) || $0 == .preconditionFailed
            }
            _ = try await transport.collect(response, event: request.event, attachmentId: attachment.id, upTo: 1 << 20)
            if response.status != .preconditionFailed { return }
        }
        throw AttachmentError(
            code: .conflict,
            message: "S3 refused to replace \(String(reflecting: key)): it changed while it was being replaced; "
                + "nothing was replaced", attachmentId: attachment.id, name: key)
    }

    /// The object's ETag, after checking it is stored with `expectedSHA256`.
    private func currentETag(key: String, attachment: Attachment, expectedSHA256: String) async throws -> String {
        let request = S3Request(method: .head, key: key, operation: "HeadObject")
        let response = try await send(
            request, attachmentId: attachment.id, accepts: { $0 == .ok || $0 == .notFound })
        _ = try await transport.collect(
            response, event: request.event, attachmentId: attachment.id, upTo: HTTPTransport.maxErrorBody)
        guard response.status == .ok else {
            throw AttachmentError(
                code: .remoteNotFound, message: "S3 has no object \(String(reflecting: key)) to replace",
                attachmentId: attachment.id, name: key)
        }
        let stored = validSHA256(response.headers.first(name: Self.sha256MetadataHeader))
        guard stored == expectedSHA256.lowercased(), let etag = response.headers.first(name: "etag"), !etag.isEmpty
        else {
            throw AttachmentError(
                code: .conflict,
                message: "S3 holds other content as \(String(reflecting: key)) (SHA-256 \(stored ?? "not stored"), "
                    + "not \(expectedSHA256)); nothing was replaced", attachmentId: attachment.id, name: key)
        }
        return etag
    }
}
