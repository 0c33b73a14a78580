import Foundation

/// The remote side of attachment sync: where files are uploaded to, downloaded from and deleted.
///
/// Implement it for your backend (a signed-URL API, an object store), or use one of the library's:
/// ``FileSystemRemoteStorage`` (a folder), and in `AttachmentSyncS3` the S3 and HTTP adapters.
///
/// Only the three `Data` methods are required. The streaming forms
/// (``uploadFile(fileURL:attachment:progress:)``, ``downloadFile(attachment:to:progress:)``) have default
/// implementations that bridge to them; implement those too so large files never sit in memory.
///
/// The contract the queue relies on:
/// - Files are addressed by ``Attachment/filename``; attachments are immutable, so uploading the same
///   filename again may overwrite.
/// - `downloadFile` of a file that does not exist throws (ideally ``AttachmentError`` with code
///   ``AttachmentError/Code-swift.struct/remoteNotFound``).
/// - `deleteFile` of a file that does not exist succeeds: deletes are retried and must be idempotent.
/// - Methods may be called concurrently for different attachments, never for the same one.
/// - Honour task cancellation where you can: ``AttachmentQueue/stopSync()`` cancels transfers in flight.
///
/// ```swift
/// struct BackendStorage: RemoteStorageAdapter {
///     let api: MyBackend
///
///     func uploadFile(data: Data, attachment: Attachment) async throws {
///         try await api.put(data, at: "attachments/\(attachment.filename)")
///     }
///
///     func downloadFile(attachment: Attachment) async throws -> Data {
///         try await api.get("attachments/\(attachment.filename)")
///     }
///
///     func deleteFile(attachment: Attachment) async throws {
///         try await api.delete("attachments/\(attachment.filename)")
///     }
/// }
/// ```
///
/// Conforming types must be `Sendable`: use a `struct`, an `actor` or a `final class` (a non-final class
/// cannot conform in Swift 6).
public protocol RemoteStorageAdapter: Sendable {
    /// Stores `data` as the attachment's file.
    func uploadFile(data: Data, attachment: Attachment) async throws

    /// Returns the attachment's file.
    func downloadFile(attachment: Attachment) async throws -> Data

    /// Deletes the attachment's file. Succeeds when the file does not exist.
    func deleteFile(attachment: Attachment) async throws

    /// Uploads the file at `fileURL` as the attachment's file, streaming it, and reports progress.
    ///
    /// The queue always calls this form. The default implementation reads the file into memory and calls
    /// ``uploadFile(data:attachment:)``, so adapters written for the `Data` API keep working; implement it
    /// to upload files of any size with bounded memory.
    func uploadFile(fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler) async throws

    /// Downloads the attachment's file to `destination` (created or replaced), streaming it, and reports
    /// progress.
    ///
    /// The queue always calls this form, with a temporary destination it verifies before moving the file
    /// into place. The default implementation calls ``downloadFile(attachment:)`` and writes the data.
    func downloadFile(attachment: Attachment, to destination: URL, progress: @escaping TransferProgressHandler)
        async throws

    /// Whether ``downloadFile(attachment:appendingTo:from:progress:)`` can fetch the rest of a file from an
    /// offset (a ranged read), so an interrupted download resumes instead of starting over.
    ///
    /// The default is `false`.
    var supportsRangedDownloads: Bool { get }

    /// Appends the attachment's content from byte `offset` on to the file at `destination`, which holds the
    /// first `offset` bytes of it, streaming, and reports progress (counting the whole file, the first
    /// `offset` bytes included).
    ///
    /// Called only when ``supportsRangedDownloads`` is `true`. An offset at or past the end of the content
    /// appends nothing. The default implementation downloads the whole file with
    /// ``downloadFile(attachment:to:progress:)`` when `offset` is 0, and otherwise throws
    /// ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/unsupported``.
    func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws
}

extension RemoteStorageAdapter {
    /// Reads the file and calls ``uploadFile(data:attachment:)``.
    public func uploadFile(
        fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        let data = try fileSystem(path: fileURL.path) { try Data(contentsOf: fileURL) }
        progress(TransferProgress(completedBytes: 0, totalBytes: Int64(data.count)))
        try await uploadFile(data: data, attachment: attachment)
        progress(TransferProgress(completedBytes: Int64(data.count), totalBytes: Int64(data.count)))
    }

    /// `false`: no ranged reads.
    public var supportsRangedDownloads: Bool { false }

    /// Downloads the whole file when `offset` is 0; throws
    /// ``AttachmentError/Code-swift.struct/unsupported`` otherwise.
    public func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        guard offset == 0 else {
            throw AttachmentError(
                code: .unsupported,
                message: "\(type(of: self)) cannot resume a download (at byte \(offset))",
                attachmentId: attachment.id)
        }
        try await downloadFile(attachment: attachment, to: destination, progress: progress)
    }

    /// Calls ``downloadFile(attachment:)`` and writes the data to `destination`.
    public func downloadFile(
        attachment: Attachment, to destination: URL, progress: @escaping TransferProgressHandler
    ) async throws {
        let data = try await downloadFile(attachment: attachment)
        try fileSystem(path: destination.path) {
            try FileManager.default.createDirectory(
                at: destination.deletingLastPathComponent(), withIntermediateDirectories: true)
            try data.write(to: destination)
        }
        progress(TransferProgress(completedBytes: Int64(data.count), totalBytes: Int64(data.count)))
    }
}
