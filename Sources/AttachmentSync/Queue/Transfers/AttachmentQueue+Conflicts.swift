import Foundation

/// Which content an attachment keeps when this device's upload met other content under its name.
public enum ConflictResolution: Sendable, Hashable {
    /// This device's content: the remote file is deleted and this device's file uploaded in its place.
    case local
    /// The remote's content: this device's file is let go and the remote file downloaded (checked
    /// against the SHA-256 stored with it).
    case remote
}

extension AttachmentQueue {
    /// Settles an upload given up because remote storage held other content under the attachment's name
    /// (``AttachmentError/Code-swift.struct/conflict``, or any other given-up upload).
    ///
    /// Until it is called both contents stay reachable: the other device's in remote storage, this
    /// device's in the local file (``Attachment/localUri``), so the app can look at both first.
    ///
    /// ```swift
    /// for await event in queue.events {
    ///     if case .gaveUp(let id, let error, _) = event, error.code == .conflict {
    ///         try await queue.resolveConflict(attachmentId: id, keeping: askUser(id))
    ///     }
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - id: The attachment whose upload was given up.
    ///   - keeping: ``ConflictResolution/local`` replaces the remote file with this device's (the other
    ///     content is deleted); ``ConflictResolution/remote`` replaces this device's file with the remote's
    ///     (this device's bytes are deleted once the record lets go of them).
    /// - Returns: The attachment as it is now: queued to upload or to download.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``;
    ///   ``AttachmentError/Code-swift.struct/invalidState`` when its upload was not given up (or, keeping
    ///   the local content, its file is gone); what the remote throws when deleting its file.
    @discardableResult
    public func resolveConflict(attachmentId id: String, keeping: ConflictResolution) async throws -> Attachment {
        try await operation {
            let store = store
            let directory = attachmentsDirectory
            guard let record = try await db.readTransaction({ tx in try store.record(id: id, in: tx) }) else {
                throw AttachmentError(
                    code: .attachmentNotFound, message: "no attachment has id \(String(reflecting: id))",
                    attachmentId: id)
            }
            guard record.state == .archived, record.givenUp == .queuedUpload else {
                throw AttachmentError(
                    code: .invalidState,
                    message: "attachment \(String(reflecting: id)) has no given-up upload to resolve: it is "
                        + "\(record.state)", attachmentId: id)
            }
            let timestamp = timestamps.next()
            let resolved: AttachmentRecord?
            switch keeping {
            case .local:
                guard let relative = record.localPath, try await localStorage.fileExists(filePath: localPath(relative))
                else {
                    throw AttachmentError(
                        code: .invalidState,
                        message: "attachment \(String(reflecting: id)) has no local file to keep", attachmentId: id)
                }
                try await remoteStorage.deleteFile(attachment: record.attachment(in: directory))
                resolved = try await db.writeTransaction { tx in
                    guard
                        try store.transition(
                            id: id, from: .archived, to: .queuedUpload, timestamp: timestamp,
                            set: .retryStateCleared + .set(.givenUp, nil), in: tx)
                    else { return nil }
                    return try store.record(id: id, in: tx)
                }
            case .remote:
                resolved = try await db.writeTransaction { tx in
                    guard
                        try store.transition(
                            id: id, from: .archived, to: .queuedDownload, timestamp: timestamp,
                            set: .retryStateCleared + .set(.givenUp, nil) + .set(.localUri, nil)
                                + .set(.contentHash, nil) + .set(.size, nil) + .set(.hasSynced, false), in: tx)
                    else { return nil }
                    return try store.record(id: id, in: tx)
                }
                if resolved != nil, let relative = record.localPath {
                    try await localStorage.deleteFile(filePath: localPath(relative))
                }
            }
            guard let resolved else {
                throw AttachmentError(
                    code: .invalidState, message: "attachment \(String(reflecting: id)) changed meanwhile",
                    attachmentId: id)
            }
            machine.retried([id])
            trigger()
            return resolved.attachment(in: directory)
        }
    }
}
