import Foundation

/// The remote side of attachment sync: where files are uploaded to, downloaded from and deleted.
///
/// Implement it for your backend (a signed-URL API, an object store), or use one of the library's:
/// ``FileSystemRemoteStorage`` (a folder), and in `AttachmentSyncS3` the S3 and HTTP adapters.
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
}
