import Foundation

/// What an attachment queue does, as a type: code that saves, deletes, downloads and syncs attachments can
/// depend on this protocol instead of ``AttachmentQueue``, and a test can hand that code a fake.
///
/// ``AttachmentQueue`` conforms. A custom queue can too: wrap an `AttachmentQueue` and add behaviour (an
/// audit log, a quota) while forwarding the rest, or implement the operations over something else
/// entirely. The requirements are the queue's operations; observation (``AttachmentQueue/progress(attachmentId:)``,
/// ``AttachmentQueue/status``, ``AttachmentQueue/events``) stays on the concrete type.
///
/// The protocol's extension adds the short forms the PowerSync docs use (`saveFile(data:mediaType:fileExtension:)
/// { tx, attachment in … }`, `deleteFile(attachmentId:)`), so code written against the docs works through the
/// protocol too.
///
/// ```swift
/// struct InspectionScreen {
///     let attachments: any AttachmentQueueProtocol
///
///     func attach(_ jpeg: Data, to checklistId: String) async throws {
///         try await attachments.saveFile(data: jpeg, mediaType: "image/jpeg", fileExtension: "jpg") { tx, photo in
///             try tx.execute(
///                 sql: "UPDATE checklists SET photo_id = ? WHERE id = ?", arguments: [photo.id, checklistId])
///         }
///     }
/// }
/// ```
public protocol AttachmentQueueProtocol: Sendable {
    /// The app's database, which holds the attachments table.
    var db: LocalDatabase { get }
    /// Where local files are kept.
    var localStorage: any LocalStorageAdapter { get }
    /// Where files are uploaded to and downloaded from.
    var remoteStorage: any RemoteStorageAdapter { get }

    /// Starts syncing: follows the watched attachments and runs transfers until ``stopSyncing()``.
    func startSync() async throws
    /// Stops syncing; transfers in flight are interrupted and resume at the next start.
    func stopSyncing() async throws
    /// Stops everything for good and waits for operations in progress.
    func close() async throws
    /// Runs a sync pass and returns once the queue is idle again.
    func syncNow() async throws

    /// The remote filename a new attachment with this id and extension gets.
    func resolveNewAttachmentFilename(attachmentId: String, fileExtension: String?) async throws -> String
    /// The absolute path of the local file of the attachment whose remote file is `filename`.
    func getLocalUri(_ filename: String) async throws -> String
    /// Reconciles the queue with the attachments the app's data refers to now.
    func processWatchedAttachments(items: [WatchedAttachmentItem]) async throws

    /// Saves new content as an attachment and queues its upload; `updateHook` runs in the same transaction.
    func saveFile(
        data: Data, mediaType: String?, fileExtension: String?, metaData: String?, id: String?,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void
    ) async throws -> Attachment
    /// Saves a file as an attachment (copying it, or taking it over with `moveFile`) and queues its upload.
    func saveFile(
        fileURL: URL, mediaType: String?, fileExtension: String?, metaData: String?, id: String?, moveFile: Bool,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void
    ) async throws -> Attachment
    /// Deletes an attachment, locally at once and remotely in the background; `updateHook` runs in the same
    /// transaction.
    func deleteFile(
        attachmentId: String, updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void
    ) async throws -> Attachment

    /// The attachment with this id, or `nil`.
    func attachment(id: String) async throws -> Attachment?
    /// Fetches an attachment's content now, if it is not here yet, and returns it once it is.
    func download(attachmentId: String) async throws -> Attachment
    /// Removes an attachment's local content, keeping its record (remote-only).
    func purge(attachmentId: String) async throws -> Attachment

    /// Deletes archived attachments beyond the cache limit now.
    func expireCache() async throws
    /// Deletes every attachment record and local file (remote copies stay).
    func clearQueue() async throws
}

extension AttachmentQueueProtocol {
    /// Saves new content as an attachment with a new id and no metadata; the form the PowerSync docs show.
    @discardableResult
    public func saveFile(
        data: Data, mediaType: String?, fileExtension: String?,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void = { _, _ in }
    ) async throws -> Attachment {
        try await saveFile(
            data: data, mediaType: mediaType, fileExtension: fileExtension, metaData: nil, id: nil,
            updateHook: updateHook)
    }

    /// Saves a file as an attachment with a new id and no metadata, copying it or (with `moveFile`) taking it
    /// over.
    @discardableResult
    public func saveFile(
        fileURL: URL, mediaType: String?, fileExtension: String? = nil, moveFile: Bool = false,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void = { _, _ in }
    ) async throws -> Attachment {
        try await saveFile(
            fileURL: fileURL, mediaType: mediaType, fileExtension: fileExtension, metaData: nil, id: nil,
            moveFile: moveFile, updateHook: updateHook)
    }

    /// Deletes an attachment without touching other rows in the same transaction.
    @discardableResult
    public func deleteFile(attachmentId: String) async throws -> Attachment {
        try await deleteFile(attachmentId: attachmentId, updateHook: { _, _ in })
    }
}

extension AttachmentQueue: AttachmentQueueProtocol {}
