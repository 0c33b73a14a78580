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
/// - Files are addressed by ``Attachment/filename``. Attachments are immutable: uploading the same content
///   again must succeed (an upload is repeated when its answer was lost). An adapter that can should be
///   create-only, as the library's are: other content under an existing filename (another device's upload
///   for the same id) throws ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/conflict``
///   and is not replaced; the queue then keeps both and lets the app choose
///   (``AttachmentQueue/resolveConflict(attachmentId:keeping:)``). An adapter that overwrites still works.
/// - `downloadFile` of a file that does not exist throws (ideally ``AttachmentError`` with code
///   ``AttachmentError/Code-swift.struct/remoteNotFound``).
/// - `deleteFile` of a file that does not exist succeeds: deletes are retried and must be idempotent.
/// - Integrity: when the adapter can, it stores ``Attachment/contentHash`` (the SHA-256 the queue computed
///   when the file was saved) with the object at upload and returns it, with the object's size, from
///   ``downloadFile(attachment:into:from:progress:)``; the queue then rejects downloaded bytes that do not
///   match, whichever device uploaded them. The library's adapters all do.
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
    /// The queue always calls this form. The default implementation calls ``uploadFile(data:attachment:)``
    /// with the whole file, so adapters written for the `Data` API keep working. For a file of the queue's
    /// own larger than 1 MiB, that `Data` is a read-only mapping of the file, not a copy in memory: its
    /// pages are the file's, which the system can drop and read again, so four uploads of 200 MB at once do
    /// not hold 800 MB of the app's memory (on iOS such pages do not count against an app extension's
    /// limit), as long as the adapter does not copy the bytes itself (into an `Array`, say). Other files are
    /// read into memory. Implement this method to upload files of any size with bounded memory, progress,
    /// and no mapping at all.
    func uploadFile(fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler) async throws

    /// Downloads the attachment's file to `destination` (created or replaced), streaming it, and reports
    /// progress.
    ///
    /// The queue always calls this form, with a temporary destination it verifies before moving the file
    /// into place. The default implementation calls ``downloadFile(attachment:)`` and writes the data
    /// (straight from the `Data`, not flushed: the queue flushes the file before it relies on it).
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

    /// Downloads the attachment's content into `destination` and returns what the remote knows about the
    /// object (its size, and the SHA-256 stored with it at upload), so the queue can check the bytes it got.
    ///
    /// With `offset` 0, `destination` is created or replaced. With a larger `offset` (only when
    /// ``supportsRangedDownloads`` is `true`), `destination` holds the first `offset` bytes of the content
    /// and the rest is appended; an adapter that cannot tell that the object is unchanged since those bytes
    /// were fetched starts over from byte 0 instead of splicing two versions. Progress counts the whole file.
    /// The adapter need not flush `destination` to stable storage: the queue flushes the file before it
    /// relies on it. An adapter that hashes the bytes as it writes them returns the digest
    /// (``RemoteObjectInfo/writtenSHA256``), which saves the queue a second read of the file.
    ///
    /// The queue always calls this form. The default implementation calls
    /// ``downloadFile(attachment:to:progress:)`` (or, from an offset,
    /// ``downloadFile(attachment:appendingTo:from:progress:)``) and returns an empty ``RemoteObjectInfo``:
    /// the queue then checks what it knows itself (the hash and size recorded when the file was saved, or
    /// carried by the watched item).
    func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo

    /// Forgets an unfinished upload of the attachment that the adapter keeps to resume later (an S3
    /// multipart upload and its saved state, say).
    ///
    /// The queue calls it when that upload will never be resumed: the attachment was deleted, its upload
    /// given up, or the queue cleared. It must succeed when there is nothing to forget. The default does
    /// nothing.
    func discardPartialUpload(attachment: Attachment) async throws
}

/// What remote storage knows about an object it serves: its size and the SHA-256 stored with it at upload.
///
/// An adapter returns it from ``RemoteStorageAdapter/downloadFile(attachment:into:from:progress:)``; the
/// queue checks the downloaded file against it (and against what its own record knows), so bytes that
/// another device uploaded are verified too.
public struct RemoteObjectInfo: Sendable, Hashable {
    /// The object's size in bytes, when the remote said (a `Content-Length`, say). The default is `nil`.
    public var size: Int64?
    /// The SHA-256 of the object's content, lowercase hex, as stored with it at upload. The default is
    /// `nil`: unknown.
    public var sha256: String?
    /// The number of bytes in the destination file once the download was written, the first `offset` bytes
    /// included; set together with ``writtenSHA256``. The default is `nil`.
    public var writtenSize: Int64?
    /// The SHA-256 (lowercase hex) of the whole destination file as the adapter wrote it, computed while the
    /// bytes streamed in. When it is set and ``writtenSize`` is the file's size on disk, the queue checks
    /// this digest instead of reading the file back. The default is `nil`: the queue hashes the file itself.
    public var writtenSHA256: String?

    /// Creates a description of an object.
    public init(size: Int64? = nil, sha256: String? = nil, writtenSize: Int64? = nil, writtenSHA256: String? = nil) {
        self.size = size
        self.sha256 = sha256
        self.writtenSize = writtenSize
        self.writtenSHA256 = writtenSHA256
    }
}

extension RemoteStorageAdapter {
    /// Calls ``uploadFile(data:attachment:)`` with the file's content: a read-only mapping of it for a file
    /// of the queue's own above 1 MiB, else the file read into memory.
    public func uploadFile(
        fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        let data = try MappedFile.contents(of: fileURL)
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

    /// Calls ``downloadFile(attachment:to:progress:)``, or from an offset
    /// ``downloadFile(attachment:appendingTo:from:progress:)``, and returns an empty ``RemoteObjectInfo``.
    public func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        try await downloadWholeOrRest(of: attachment, into: destination, from: offset, progress: progress)
        return RemoteObjectInfo()
    }

    /// Downloads the attachment into `destination`: the whole file with
    /// ``downloadFile(attachment:to:progress:)`` when `offset` is 0, else the bytes from `offset` on with
    /// ``downloadFile(attachment:appendingTo:from:progress:)``. What the default
    /// ``downloadFile(attachment:into:from:progress:)`` does before it returns, for adapters that add what
    /// they know of the object to it.
    package func downloadWholeOrRest(
        of attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        if offset > 0 {
            try await downloadFile(attachment: attachment, appendingTo: destination, from: offset, progress: progress)
        } else {
            try await downloadFile(attachment: attachment, to: destination, progress: progress)
        }
    }

    /// Does nothing: the adapter keeps no partial uploads.
    public func discardPartialUpload(attachment: Attachment) async throws {}

    /// Calls ``downloadFile(attachment:)`` and writes the data to `destination`, unflushed.
    public func downloadFile(
        attachment: Attachment, to destination: URL, progress: @escaping TransferProgressHandler
    ) async throws {
        let data = try await downloadFile(attachment: attachment)
        let files = SystemFileOperations()
        try files.makeDirectory(atPath: destination.deletingLastPathComponent().path)
        try files.write(data, toPath: destination.path, flushing: false)
        progress(TransferProgress(completedBytes: Int64(data.count), totalBytes: Int64(data.count)))
    }
}
