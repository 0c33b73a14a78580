import Crypto
import Foundation

/// Re-encrypting one stored file under the current key, for ``KeyRotation``.
extension EncryptedRemoteStorage {
    /// What became of one attachment's stored file.
    enum RotationOutcome: Sendable, Equatable {
        /// Re-encrypted under the current key (or encrypted, from a plain file ``plaintextReads`` accepts).
        case rotated
        /// Already under the current key: left as it is.
        case upToDate
        /// The remote holds no file for it.
        case missing
    }

    /// Replaces the attachment's stored file with its content encrypted under the current key, unless it is
    /// encrypted with that key already. The content never touches the disk: the stored file is downloaded
    /// (ciphertext) into `work`, read twice (once to authenticate it and learn the content's SHA-256, which
    /// the new header derives from; once more, decrypted and encrypted again as it streams, into a second
    /// file), and the remote replaces its file only if it still holds the one read
    /// (``ReplaceableRemoteStorage/replaceFile(fileURL:attachment:replacing:)``). Both files are removed.
    ///
    /// - Throws: `keyUnavailable` when either key is missing, `integrityMismatch` when the stored file does
    ///   not decrypt, is plain and not accepted, or holds other content than the record's SHA-256, `conflict`
    ///   when the remote's file changed meanwhile: in every case the stored file is left as it was.
    func rotate(_ attachment: Attachment, on remote: any ReplaceableRemoteStorage, work: URL) async throws
        -> RotationOutcome
    {
        let currentKeyId = try await keys.currentKeyId()
        let currentKey = try await masterKey(currentKeyId, for: attachment)
        let files = SystemFileOperations()
        let sealed = work.appendingPathComponent(FileName.uniqueTemporaryName())
        let resealed = work.appendingPathComponent(FileName.uniqueTemporaryName())
        defer {
            try? files.removeFile(atPath: sealed.path)
            try? files.removeFile(atPath: resealed.path)
        }
        do {
            _ = try await remote.downloadFile(attachment: Self.stored(attachment), into: sealed, from: 0) { _ in }
        } catch let error as AttachmentError where error.code == .remoteNotFound {
            // One answer is not enough to call a file gone (a file called gone keeps its old key for good):
            // the remote must also describe none.
            guard try await remote.fileInfo(attachment: Self.stored(attachment)) == nil else {
                throw AttachmentError(
                    code: .remoteUnavailable,
                    message: "remote storage answered that attachment \(String(reflecting: attachment.id)) has no "
                        + "file, but describes one; it was left as it was, to be rotated by a later run",
                    attachmentId: attachment.id, name: attachment.filename, underlying: error)
            }
            return .missing
        }
        let storedSHA256 = try await files.digest(ofFileAt: sealed.path).sha256
        let head = try files.openForReading(atPath: sealed.path)
        let start = try head.read(upToCount: 304) ?? Data()
        try head.close()

        // The content's source: a decrypting stream, or the plain bytes as they are.
        let opener: (@Sendable () throws -> DecryptingStream)?
        if readsPlain(start, attachment) {
            opener = nil
        } else {
            let header = try Self.header(of: start, attachment)
            if header.keyId == currentKeyId { return .upToDate }
            let oldKey = try await masterKey(header.keyId, for: attachment)
            let id = attachment.id
            opener = { DecryptingStream(attachmentId: id) { _ in oldKey } }
        }
        do {
            // Pass 1: authenticate every segment and hash the content (nothing written).
            let contentSHA256 = try await onBlockingThread {
                try Self.contentDigest(of: sealed, opener: opener)
            }
            if opener == nil {
                try Self.checkPlain(sha256: contentSHA256, attachment)
            } else if let expected = attachment.contentHash?.lowercased(), expected != contentSHA256 {
                throw Self.rejected(
                    attachment,
                    EncryptedFormat.Failure(
                        kind: .segmentRejected,
                        detail: "it decrypts to content with SHA-256 \(contentSHA256), not the record's \(expected)"))
            }
            // Pass 2: decrypt (or read) and encrypt under the current key as it streams.
            let header = try header(for: attachment, contentSHA256: contentSHA256, keyId: currentKeyId, key: currentKey)
            let id = attachment.id
            let (_, size, sha256) = try await onBlockingThread {
                try Self.transform(sealed, into: resealed) { chunk, state, emit in
                    try state.update(chunk, emit: emit)
                } finish: { state, emit in
                    try state.finish(emit: emit)
                } stream: {
                    Reencryption(
                        opening: try opener?(),
                        sealing: try EncryptingStream(header: header, masterKey: currentKey, attachmentId: id))
                }
            }
            try await remote.replaceFile(
                fileURL: resealed, attachment: Self.stored(attachment, size: size, sha256: sha256),
                replacing: storedSHA256)
            return .rotated
        } catch let failure as EncryptedFormat.Failure {
            throw Self.rejected(attachment, failure)
        }
    }

    /// The SHA-256 of the content of the file at `source`: decrypted by `opener`'s stream (which
    /// authenticates every segment and throws at the first that does not), or the file itself without one.
    static func contentDigest(of source: URL, opener: (@Sendable () throws -> DecryptingStream)?) throws -> String {
        var stream = try opener?()
        var hasher = SHA256()
        let input = try FileHandle(forReadingFrom: source)
        defer { try? input.close() }
        while let chunk = try input.read(upToCount: 1 << 20), !chunk.isEmpty {
            if stream != nil {
                hasher.update(data: try stream!.update(chunk))
            } else {
                hasher.update(data: chunk)
            }
        }
        if stream != nil { hasher.update(data: try stream!.finish()) }
        return FileStreaming.hex(hasher.finalize())
    }
}

/// A stored file decrypted (when it is encrypted) and encrypted again as it streams: one segment of each
/// in memory.
struct Reencryption {
    var opening: DecryptingStream?
    var sealing: EncryptingStream

    mutating func update(_ chunk: UnsafeRawBufferPointer, emit: EncryptedRemoteStorage.Emit) throws {
        // Taken out while both streams run, so that each is changed in place (no copy of what it holds).
        guard var opening else { return try sealing.update(chunk, emit: emit) }
        self.opening = nil
        defer { self.opening = opening }
        try opening.update(chunk) { content in try sealing.update(content, emit: emit) }
    }

    mutating func finish(emit: EncryptedRemoteStorage.Emit) throws {
        if var opening {
            self.opening = nil
            defer { self.opening = opening }
            try opening.finish { content in try sealing.update(content, emit: emit) }
        }
        try sealing.finish(emit: emit)
    }
}
