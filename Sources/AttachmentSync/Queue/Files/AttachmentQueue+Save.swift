import Foundation
import Logging

extension AttachmentQueue {
    /// Saves a new attachment's file and queues it for upload; `updateHook` runs in the same transaction,
    /// so the app's row that refers to the attachment is written together with its record.
    ///
    /// All or nothing: when the hook throws (or anything else fails), no record and no file are left, and
    /// the error is rethrown; when it returns, the record is committed and its file is in place (written to
    /// stable storage before the commit). The call never waits for transfers in flight.
    ///
    /// ```swift
    /// let photo = try await queue.saveFile(data: jpeg, mediaType: "image/jpeg", fileExtension: "jpg") { tx, attachment in
    ///     try tx.execute(
    ///         sql: "UPDATE checklists SET photo_id = ? WHERE id = ?",
    ///         arguments: [attachment.id, checklistId]
    ///     )
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - data: The file's content.
    ///   - mediaType: Its media type, stored with the record.
    ///   - fileExtension: The extension the file is named with (`<id>.<ext>`), without the dot.
    ///   - metaData: The app's own metadata (JSON, say). The default is `nil`.
    ///   - id: The attachment's id. The default is `nil`: a new lowercase UUID.
    ///   - updateHook: Runs inside the transaction that creates the record. The default does nothing.
    /// - Returns: The new record, in ``AttachmentState/queuedUpload``.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidName`` for an id
    ///   or extension that cannot name a file (an id may not contain `.`, as the remote file is named
    ///   `<id>.<ext>`), ``AttachmentError/Code-swift.struct/alreadyExists`` when the id (or that file name)
    ///   is taken; the hook's error; database and file system errors.
    @discardableResult
    public func saveFile(
        data: Data,
        mediaType: String?,
        fileExtension: String?,
        metaData: String? = nil,
        id: String? = nil,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void = { _, _ in }
    ) async throws -> Attachment {
        try await operation {
            try await saveBatch(
                [NewFile(data: data, mediaType: mediaType, fileExtension: fileExtension, metaData: metaData, id: id)]
            ) { tx, attachments in try updateHook(tx, attachments[0]) }[0]
        }
    }

    /// Saves a new attachment from an existing file and queues it for upload, without reading the file
    /// into memory: it is copied (or, with `moveFile`, taken over) into the attachments directory in chunks
    /// while its SHA-256 is computed. `updateHook` runs in the transaction that creates the record.
    ///
    /// The file handed over is never lost:
    /// - With `moveFile`, the file is first given a second name in the attachments directory (a hard link,
    ///   when both are on one volume; otherwise a copy), and the original is removed only once the record
    ///   has been committed to stable storage. A crash at any moment leaves the original, or the committed
    ///   attachment, or both; never neither.
    /// - All or nothing: when the hook throws (or anything else fails), no record and no copy are left and
    ///   the original is untouched. Once the record is committed nothing else can fail: if the original
    ///   cannot be removed, it stays where it is and a warning is logged.
    /// - A symbolic link is followed: the attachment holds the bytes it points to, and with `moveFile` only
    ///   the link is removed. A folder, FIFO or device is refused.
    ///
    /// ```swift
    /// let video = try await queue.saveFile(fileURL: recordingURL, mediaType: "video/mp4", fileExtension: nil, moveFile: true) {
    ///     tx, attachment in
    ///     try tx.execute(sql: "UPDATE visits SET video_id = ? WHERE id = ?", arguments: [attachment.id, visitId])
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - fileURL: The file to adopt.
    ///   - mediaType: Its media type, stored with the record.
    ///   - fileExtension: The extension the attachment's file is named with. The default is `nil`: the
    ///     source file's extension.
    ///   - metaData: The app's own metadata. The default is `nil`.
    ///   - id: The attachment's id. The default is `nil`: a new lowercase UUID.
    ///   - moveFile: Whether the attachment takes the file over (it is removed from `fileURL` once the record
    ///     is committed) instead of copying it. The default is `false`.
    ///   - updateHook: Runs inside the transaction that creates the record. The default does nothing.
    /// - Returns: The new record, in ``AttachmentState/queuedUpload``.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/localFileNotFound`` when
    ///   there is no file at `fileURL`, ``AttachmentError/Code-swift.struct/unsupported`` when it is not a
    ///   regular file, ``AttachmentError/Code-swift.struct/invalidState`` when `moveFile` is asked of a file
    ///   inside the attachments directory, and the errors of
    ///   ``saveFile(data:mediaType:fileExtension:metaData:id:updateHook:)``.
    @discardableResult
    public func saveFile(
        fileURL: URL,
        mediaType: String?,
        fileExtension: String? = nil,
        metaData: String? = nil,
        id: String? = nil,
        moveFile: Bool = false,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void = { _, _ in }
    ) async throws -> Attachment {
        try await operation {
            try await saveBatch(
                [
                    NewFile(
                        fileURL: fileURL, mediaType: mediaType, fileExtension: fileExtension, metaData: metaData,
                        id: id, moveFile: moveFile)
                ]
            ) { tx, attachments in try updateHook(tx, attachments[0]) }[0]
        }
    }

    /// The id, remote filename and local file name of a new attachment, validated.
    func newAttachmentNames(id: String?, fileExtension: String?) throws
        -> (id: String, filename: String, localName: String)
    {
        let id = id ?? UUID().uuidString.lowercased()
        let ext = try FileName.normalizedExtension(fileExtension, attachmentId: id)
        let filename = try FileName.derivedFilename(id: id, fileExtension: ext)
        let localName = try FileName.localName(id: id, fileExtension: ext)
        return (id, filename, localName)
    }
}
