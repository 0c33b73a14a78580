import Foundation

/// Background transfers of encrypted attachments: the service sends an encrypted copy of the file, and the
/// queue adopts a download by decrypting what the service fetched. Both go through the wrapped adapter's
/// requests, so they run in a ``BackgroundTransferService`` exactly when the wrapped adapter's would.
extension EncryptedRemoteStorage: BackgroundTransferForming {
    /// The wrapped adapter, when it forms background transfers.
    var forming: (any BackgroundTransferForming)? {
        guard let forming = base as? any BackgroundTransferForming, forming.formsBackgroundTransfers else { return nil }
        return forming
    }

    /// Whether the wrapped adapter forms background transfers (`S3RemoteStorage` and `PresignedRemoteStorage`
    /// do); without it, ``BackgroundTransfers`` is refused at ``AttachmentQueue/startSync()``.
    public var formsBackgroundTransfers: Bool { forming != nil }

    /// `nil`: the service must not send the file itself. The queue asks for
    /// ``backgroundUpload(for:fileURL:bodyFile:)``, which sends an encrypted copy.
    public func backgroundUploadRequest(for attachment: Attachment, fileURL: URL) async throws -> PreparedRequest? {
        nil
    }

    /// Encrypts the file, as an upload in the process would, into `bodyFile` and forms the wrapped adapter's
    /// request that uploads that copy; the result names the copy as the body, and the ciphertext's size and
    /// SHA-256 as what the remote will hold (what confirms the upload).
    ///
    /// A file whose encrypted copy would be larger than the wrapped adapter's
    /// ``BackgroundTransferForming/largestBackgroundUpload`` is not encrypted: `nil`. The copy is removed
    /// again when the wrapped adapter forms no request or forming throws; otherwise the queue removes it once the transfer's result is adopted.
    ///
    /// - Throws: `keyUnavailable` without the current key (the upload waits for it, as in the process);
    ///   `integrityMismatch` when the file is not the content the attachment's ``Attachment/contentHash``
    ///   says; what the wrapped adapter throws.
    public func backgroundUpload(for attachment: Attachment, fileURL: URL, bodyFile body: URL) async throws
        -> BackgroundUpload?
    {
        guard let forming else { return nil }
        let files = SystemFileOperations()
        // Not encrypted for nothing: a file whose encrypted copy is larger than the wrapped adapter sends
        // in the background (at least a tag longer) stays in the process.
        if let largest = forming.largestBackgroundUpload, let size = try files.info(atPath: fileURL.path)?.size,
            size.addingClamped(Int64(EncryptedFormat.tagSize)) > largest
        {
            return nil
        }
        let (_, sealedSize, sealedSHA256) = try await seal(fileURL, of: attachment, into: body)
        do {
            guard
                let request = try await forming.backgroundUploadRequest(
                    for: Self.stored(attachment, size: sealedSize, sha256: sealedSHA256), fileURL: body)
            else {
                try? files.removeFile(atPath: body.path)
                return nil
            }
            return BackgroundUpload(
                request: request, bodyFile: body, storedSize: sealedSize, storedSHA256: sealedSHA256)
        } catch {
            try? files.removeFile(atPath: body.path)
            throw error
        }
    }

    /// The wrapped adapter's request that downloads the stored (encrypted) object.
    public func backgroundDownloadRequest(for attachment: Attachment) async throws -> PreparedRequest? {
        try await forming?.backgroundDownloadRequest(for: Self.stored(attachment))
    }

    /// What the wrapped adapter says the remote holds: the encrypted object's size and SHA-256.
    public func storedObject(for attachment: Attachment) async throws -> RemoteObjectInfo? {
        try await forming?.storedObject(for: Self.stored(attachment))
    }

    /// Decrypts the object a background download fetched into `destination`, as a download in the process
    /// would (the body stays the service's); `nil` for a plain file ``plaintextReads`` accepts, which the
    /// queue then checks against the attachment's row as any download.
    ///
    /// - Throws: `integrityMismatch` when the body does not decrypt as the attachment's (nothing is left at
    ///   `destination`); `keyUnavailable` when its key is not on this device (the download waits for it).
    public func contentOfBackgroundDownload(_ body: URL, for attachment: Attachment, into destination: URL)
        async throws -> RemoteObjectInfo?
    {
        let start = try Self.start(of: body)
        if readsPlain(start, attachment) { return nil }
        let header = try Self.header(of: start, attachment)
        let key = try await masterKey(header.keyId, for: attachment)
        return try await Self.decrypt(body, of: attachment, key: key, into: destination)
    }
}
