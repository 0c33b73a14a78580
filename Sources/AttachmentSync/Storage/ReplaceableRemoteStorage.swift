import Foundation

/// Remote storage that can replace a file it holds, but only while it still holds the file the caller read:
/// what re-encrypting stored files under a new key needs (``KeyRotation``). Uploads never replace a file;
/// this is the one way a library tool changes one, and it never replaces what it did not read.
///
/// ``FileSystemRemoteStorage`` conforms, and in `AttachmentSyncHTTP` the S3 adapter does (a `PutObject`
/// conditional on the object's ETag, `If-Match`).
public protocol ReplaceableRemoteStorage: ListableRemoteStorage {
    /// Replaces the attachment's file with the file at `fileURL`, whose size and SHA-256 are
    /// `attachment.size` and `attachment.contentHash` (stored with it, as an upload stores them), if the
    /// remote still holds a file whose content has SHA-256 `expectedSHA256`.
    ///
    /// Readers see the old file or the new one, never a mix or none.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/conflict`` when the remote
    ///   holds other content (nothing is replaced), ``AttachmentError/Code-swift.struct/remoteNotFound`` when
    ///   it holds none, ``AttachmentError/Code-swift.struct/integrityMismatch`` when the file at `fileURL` is
    ///   not what `attachment` says.
    func replaceFile(fileURL: URL, attachment: Attachment, replacing expectedSHA256: String) async throws
}
