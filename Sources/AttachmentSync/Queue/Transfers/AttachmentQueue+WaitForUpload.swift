import Foundation

extension AttachmentQueue {
    /// Waits until the attachment's content has reached remote storage, and returns it.
    ///
    /// This is the other half of "not uploaded yet": a device that sees a row before the file it refers
    /// to was uploaded waits (see ``Configuration/notUploadedYetBackoff``). An app that can hold a row back
    /// until its attachment is uploaded avoids that wait altogether: call this from the upload connector
    /// before sending the row that refers to the attachment.
    ///
    /// ```swift
    /// // In the connector, before uploading a row that refers to photoId:
    /// _ = try await queue.waitUntilUploaded(attachmentId: photoId, timeout: .seconds(30))
    /// try await backend.upsert(row)
    /// ```
    ///
    /// Returns at once when the content was uploaded already (or downloaded: then remote storage has it).
    /// Uploads run as usual while it waits: with sync started, or with ``syncNow()``. The wait is measured
    /// on ``Configuration/clock``.
    ///
    /// - Parameters:
    ///   - attachmentId: The attachment to wait for.
    ///   - timeout: How long to wait at most.
    /// - Returns: The attachment, with ``Attachment/hasSynced`` `true`.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound`` when
    ///   there is no such attachment (or it is deleted while waiting), ``AttachmentError/Code-swift.struct/invalidState``
    ///   when its upload was given up or it is being deleted, ``AttachmentError/Code-swift.struct/timedOut``
    ///   when `timeout` passes first; `CancellationError` when the task is cancelled.
    public func waitUntilUploaded(attachmentId: String, timeout: Duration) async throws -> Attachment {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        let clock = configuration.clock
        // Decided without waiting when it can be: uploaded already, never going to be, or no time given.
        if let outcome = try Self.uploadOutcome(
            try await db.readTransaction { tx in try store.record(id: attachmentId, in: tx) }, attachmentId,
            directory)
        {
            return outcome
        }
        guard timeout > .zero else { throw Self.timedOut(attachmentId, timeout) }
        let records = try db.watch(
            sql: store.recordByIdSQL, parameters: [attachmentId]
        ) { try AttachmentRecord(cursor: $0) }
        return try await withThrowingTaskGroup(of: Attachment?.self) { group in
            group.addTask {
                for try await rows in records {
                    if let outcome = try Self.uploadOutcome(rows.first, attachmentId, directory) { return outcome }
                }
                throw CancellationError()
            }
            group.addTask {
                try await clock.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let attachment = first else {
                throw Self.timedOut(attachmentId, timeout)
            }
            return attachment
        }
    }

    /// The attachment when its content reached remote storage; `nil` while it may still; throws when it
    /// never will (no record, deleted, upload given up).
    private static func uploadOutcome(
        _ record: AttachmentRecord?, _ attachmentId: String, _ directory: URL
    ) throws -> Attachment? {
        guard let record else {
            throw AttachmentError(
                code: .attachmentNotFound, message: "no attachment has id \(String(reflecting: attachmentId))",
                attachmentId: attachmentId)
        }
        if record.hasSynced { return record.attachment(in: directory) }
        guard
            record.givenUp == .queuedUpload || record.state == .queuedDelete
                || (record.state == .archived && record.localPath == nil)
        else { return nil }
        let why =
            record.state == .queuedDelete
            ? "it is being deleted" : "its upload was given up (\(record.lastError ?? "no error kept"))"
        throw AttachmentError(
            code: .invalidState,
            message: "attachment \(String(reflecting: attachmentId)) will not be uploaded: \(why)",
            attachmentId: attachmentId)
    }

    private static func timedOut(_ attachmentId: String, _ timeout: Duration) -> AttachmentError {
        AttachmentError(
            code: .timedOut,
            message: "attachment \(String(reflecting: attachmentId)) was not uploaded within \(timeout)",
            attachmentId: attachmentId)
    }
}
