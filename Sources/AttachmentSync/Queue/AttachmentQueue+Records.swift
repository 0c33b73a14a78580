import Foundation

/// Reading the attachments the queue records.
extension AttachmentQueue {
    /// The attachment with the given id, or `nil` when there is none.
    public func attachment(id: String) async throws -> Attachment? {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        return try await db.readTransaction { tx in try store.record(id: id, in: tx)?.attachment(in: directory) }
    }

    /// The attachments in the given state, oldest change first.
    public func attachments(in state: AttachmentState) async throws -> [Attachment] {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        return try await db.readTransaction { tx in
            try store.records(in: state, in: tx).map {
                $0.attachment(in: directory)
            }
        }
    }

    /// Every attachment, oldest change first.
    public func allAttachments() async throws -> [Attachment] {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        return try await db.readTransaction { tx in try store.records(in: tx).map { $0.attachment(in: directory) } }
    }
}
