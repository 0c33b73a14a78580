import Foundation
import Logging

extension AttachmentQueue {

    /// The progress of an attachment's current or next transfer, upload or download, eager or on request.
    ///
    /// Updates are throttled (at most one per ``Configuration/progressInterval``, or per 1 % of the file),
    /// never go backwards, and end with the transfer's final state; then the sequence ends. When the
    /// attachment has nothing left to transfer (its content is here, or there is no such attachment), the
    /// sequence gives one final update (or none) and ends.
    ///
    /// ```swift
    /// Task {
    ///     for await update in queue.progress(attachmentId: id) {
    ///         progressBar.value = update.fractionCompleted ?? 0
    ///     }
    /// }
    /// try await queue.download(attachmentId: id)
    /// ```
    public nonisolated func progress(attachmentId id: String) -> AsyncStream<AttachmentProgress> {
        let (stream, token) = progressCenter.subscribe(id)
        Task { await self.endProgressIfIdle(id, token: token) }
        return stream
    }

    private func endProgressIfIdle(_ id: String, token: Int) async {
        guard !machine.isTransferring(id) else { return }
        let record: AttachmentRecord?
        do {
            try await waitForInit()
            record = try await readRecord(id)
        } catch {
            progressCenter.endIfIdle(id, token: token, final: nil)
            return
        }
        guard let record else {
            progressCenter.endIfIdle(id, token: token, final: nil)
            return
        }
        guard record.localPath != nil, record.state == .synced || record.state == .archived else { return }
        let size = record.size ?? 0
        progressCenter.endIfIdle(
            id, token: token,
            final: AttachmentProgress(
                attachmentId: id, direction: record.hasSynced ? .download : .upload, completedBytes: size,
                totalBytes: size, status: .finished))
    }

    /// What happens to attachments from now on: uploads, downloads, deletes, archiving, evictions, purges,
    /// failures and give-ups. Each access makes a new subscriber; its sequence ends when the queue is
    /// closed. It holds the newest 10,000 events its reader has not taken yet.
    ///
    /// ```swift
    /// for await event in queue.events {
    ///     if case .gaveUp(let id, let error, _) = event { report(id, error) }
    /// }
    /// ```
    public nonisolated var events: AsyncStream<AttachmentEvent> {
        eventCenter.subscribe()
    }
}
