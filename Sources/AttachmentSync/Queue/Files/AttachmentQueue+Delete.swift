import Foundation
import Logging

extension AttachmentQueue {
    /// Deletes an attachment: its record moves to ``AttachmentState/queuedDelete`` and `updateHook` runs in
    /// the same transaction (to clear the app's reference); then the local file is removed, and the remote
    /// copy is deleted in the background, after which the record goes too.
    ///
    /// The record stays until the remote delete succeeds, so the remote copy is never orphaned. When the
    /// hook throws, nothing changes.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``
    ///   when no attachment has the id; the hook's error; database and file system errors.
    @discardableResult
    public func deleteFile(
        attachmentId: String,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void = { _, _ in }
    ) async throws -> Attachment {
        try await operation {
            let store = store
            let directory = attachmentsDirectory
            let timestamp = timestamps.next()
            let runningBefore = machine.handle(of: attachmentId)
            // Flushed to stable storage before the local file goes: a power loss must not bring back a
            // record (and the app's row) whose file was deleted.
            let record = try await db.durableWriteTransaction { tx -> AttachmentRecord in
                guard var record = try store.record(id: attachmentId, in: tx) else {
                    throw AttachmentError(
                        code: .attachmentNotFound,
                        message: "no attachment has id \(String(reflecting: attachmentId))",
                        attachmentId: attachmentId)
                }
                try store.transition(
                    id: attachmentId, from: record.state, to: .queuedDelete, timestamp: timestamp,
                    set: .set(.hasSynced, false) + .set(.givenUp, nil) + .retryStateCleared, in: tx)
                record.state = .queuedDelete
                record.hasSynced = false
                record.givenUp = nil
                record.timestamp = timestamp
                try updateHook(tx, record.attachment(in: directory))
                return record
            }
            machine.noteChanged(attachmentId)
            // An upload or download of the old state is pointless now; the delete starts once it has stopped.
            // Only that transfer is cancelled: the delete itself may already be running (the commit triggered
            // a pass while this call waited for it), and it must go on.
            if let task = machine.handle(of: attachmentId), task == runningBefore { task.cancel() }
            var result = record
            if let relative = record.localPath {
                // The delete is committed: from here on nothing is thrown. A file that cannot be removed now is
                // removed by the delete transfer (or at the next startup).
                do {
                    try await localStorage.deleteFile(filePath: localPath(relative))
                    try await db.writeTransaction { tx in
                        try store.update(id: attachmentId, ifState: .queuedDelete, set: .set(.localUri, nil), in: tx)
                    }
                    result.localPath = nil
                } catch {
                    logError("the deleted attachment's local file could not be removed yet", error, id: attachmentId)
                }
            }
            trigger()
            return result.attachment(in: directory)
        }
    }

    /// Removes every attachment record and its local file, stopping transfers in flight. Remote copies
    /// are not deleted. Use it when a user signs out, say.
    ///
    /// This is the one call that discards content that never reached remote storage
    /// (``Attachment/isLocalOnly``): it does what it says.
    public func clearQueue() async throws {
        try await operation {
            for handle in machine.transferHandles.values { handle.cancel() }
            let store = store
            // First every record lets go of its file (so a crash in what follows leaves only files that
            // startup can attribute and remove), then the files go, then the records.
            let records = try await db.durableWriteTransaction { tx -> [AttachmentRecord] in
                let records = try store.records(in: tx)
                try store.archiveAllReleasingContent(in: tx)
                return records
            }
            machine.tableCleared()
            for relative in records.compactMap(\.localPath) {
                try await localStorage.deleteFile(filePath: localPath(relative))
            }
            try await db.writeTransaction { tx in
                try store.deleteAll(in: tx)
            }
            // Unfinished uploads the remote keeps to resume will never resume now.
            for record in records where record.state == .queuedUpload || record.givenUp == .queuedUpload {
                try? await remoteStorage.discardPartialUpload(attachment: record.attachment(in: attachmentsDirectory))
            }
            logger.debug("queue cleared", metadata: ["records": "\(records.count)"])
        }
    }
}
