import AttachmentSync
import Foundation

extension S3RemoteStorage: ListableRemoteStorage {
    /// The objects directly under ``Configuration/keyPrefix``, 1,000 a page (`ListObjectsV2`, with `/` as the
    /// delimiter: keys in deeper "folders" are not attachments and are not listed), named by their key
    /// without the prefix, with their size and `LastModified`.
    ///
    /// - Parameter continuation: `nil`, then the previous page's `RemoteFileListing.next`
    ///   (S3's continuation token).
    public func listFiles(after continuation: String?) async throws -> RemoteFileListing {
        try await listFiles(after: continuation, pageSize: 1_000)
    }

    /// One page of at most `pageSize` objects (tests use small pages to cross page boundaries).
    func listFiles(after continuation: String?, pageSize: Int) async throws -> RemoteFileListing {
        let prefix = configuration.keyPrefix
        var query: [(name: String, value: String)] = [
            ("delimiter", "/"), ("list-type", "2"), ("max-keys", String(pageSize)), ("prefix", prefix),
        ]
        if let continuation { query.append(("continuation-token", continuation)) }
        let request = S3Request(method: .get, key: nil, query: query, operation: "ListObjectsV2")
        let response = try await send(request, attachmentId: nil, accepts: { _ in true })
        let body = try await transport.collect(response, event: request.event, attachmentId: nil, upTo: 16 << 20)
        guard (200..<300).contains(response.status.code), let root = S3XML.parse(body),
            root.name == "ListBucketResult"
        else {
            throw transport.error(
                for: response, body: body, event: request.event, attachmentId: nil,
                object: "s3://\(configuration.bucket)/\(prefix)")
        }
        var files: [RemoteFile] = []
        for object in root.children("Contents") {
            // Keys keep their spaces: the text of <Key> is not trimmed like other values.
            guard let key = object.child("Key")?.text, key.hasPrefix(prefix), key.count > prefix.count,
                let size = object.value("Size").flatMap({ Int64($0) })
            else { continue }
            let name = String(key.dropFirst(prefix.count))
            // The delimiter keeps deeper keys out; a server that ignores it must not hand them to callers.
            guard !name.contains("/") else { continue }
            files.append(
                RemoteFile(
                    storedName: name, filename: name, size: size,
                    lastModified: object.value("LastModified").flatMap(Self.parseTimestamp)))
        }
        guard root.value("IsTruncated") == "true" else { return RemoteFileListing(files: files, next: nil) }
        guard let next = root.value("NextContinuationToken"), !next.isEmpty else {
            throw AttachmentError(
                code: .remoteFailure,
                message: "S3 ListObjectsV2 of \(String(reflecting: prefix)) said there is more but gave no "
                    + "continuation token", name: prefix)
        }
        return RemoteFileListing(files: files, next: next)
    }

    /// The filename itself: its object key is the key prefix and the filename.
    ///
    /// - Throws: `invalidName` for an empty filename or one with `/` (the object would be in a deeper
    ///   "folder", which listings leave out).
    public func storedName(forFilename filename: String) throws -> String {
        try Self.checkListedName(filename)
        return filename
    }

    /// Deletes the object ``Configuration/keyPrefix`` + the stored name; succeeds when there is none.
    public func deleteListedFile(_ file: RemoteFile) async throws {
        try Self.checkListedName(file.storedName)
        try await deleteFile(attachment: Attachment(id: file.storedName, filename: file.storedName, state: .archived))
    }

    /// The object's size and the SHA-256 stored with it (`x-amz-meta-sha256`), from a `HEAD`; `nil` when
    /// there is no object.
    public func fileInfo(attachment: Attachment) async throws -> RemoteObjectInfo? {
        let key = try objectKey(for: attachment)
        let request = S3Request(method: .head, key: key, operation: "HeadObject")
        let response = try await send(
            request, attachmentId: attachment.id, accepts: { $0 == .ok || $0 == .notFound })
        _ = try await transport.collect(
            response, event: request.event, attachmentId: attachment.id, upTo: HTTPTransport.maxErrorBody)
        guard response.status == .ok else { return nil }
        return RemoteObjectInfo(
            size: response.headers.first(name: "content-length").flatMap { Int64($0) },
            sha256: validSHA256(response.headers.first(name: Self.sha256MetadataHeader)))
    }

    private static func checkListedName(_ name: String) throws {
        guard !name.isEmpty, !name.contains("/") else {
            throw AttachmentError(
                code: .invalidName,
                message: "\(String(reflecting: name)) is not an object name directly under the key prefix",
                name: name)
        }
    }
}
