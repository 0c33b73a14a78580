import Foundation

/// A file uploaded in parts that never exists whole on disk: each part is written into a file of its own
/// when it is about to go, and removed after. How ``EncryptedRemoteStorage`` uploads a large file without
/// a sealed copy of its size beside it.
package protocol UploadParts: Sendable {
    /// The file's size in bytes.
    var size: Int64 { get }
    /// The file's SHA-256 (lowercase hex), stored with the object.
    var sha256: String { get }
    /// Changes whenever the file's bytes would (the modification time of what they are made from): an
    /// unfinished upload recorded with another value is not resumed.
    var modificationTime: Double { get }
    /// Writes bytes `offset..<offset + length` of the file into a new file and returns where, with the
    /// digests of the bytes written (taken as they were made, so the part is not read again to sign it);
    /// the caller removes the file. The MD5 only when `md5` is `true`.
    func materialize(offset: Int64, length: Int64, md5: Bool) async throws -> MadePart
}

/// A part of an ``UploadParts`` written into a file of its own, and the digests of its bytes.
package struct MadePart: Sendable {
    /// Where the part is.
    package var url: URL
    /// Its SHA-256, lowercase hex.
    package var sha256: String
    /// Its MD5, base64 (as `Content-MD5` takes it), when asked for.
    package var md5: String?

    package init(url: URL, sha256: String, md5: String?) {
        self.url = url
        self.sha256 = sha256
        self.md5 = md5
    }
}

/// An adapter that can upload an ``UploadParts`` (`S3RemoteStorage` with a multipart upload).
package protocol PartwiseUploading: RemoteStorageAdapter {
    /// Whether a file of `size` bytes would be uploaded in parts, so that ``uploadParts(_:attachment:progress:)``
    /// takes it.
    func uploadsInParts(size: Int64) -> Bool

    /// Uploads the file `parts` makes, a part at a time, as ``RemoteStorageAdapter/uploadFile(fileURL:attachment:progress:)``
    /// uploads a file of that size (resumable, create-only as configured), with `attachment`'s size and
    /// SHA-256 those of `parts`.
    func uploadParts(_ parts: any UploadParts, attachment: Attachment, progress: @escaping TransferProgressHandler)
        async throws
}
