import Foundation

extension AttachmentQueue {
    /// Queues an attachment's given-up transfer again (see ``Attachment/givenUp``), or starts a transfer that
    /// waits for its backoff delay at the next pass instead of later.
    ///
    /// A given-up upload goes back to ``AttachmentState/queuedUpload``, a download to
    /// ``AttachmentState/queuedDownload``, a remote delete to ``AttachmentState/queuedDelete``, each with its
    /// attempt count reset; the pass it triggers (while syncing, or the next ``syncNow()``) runs it.
    ///
    /// ```swift
    /// for await event in queue.events {
    ///     if case .gaveUp(let id, _, _) = event { pendingRetry.insert(id) }
    /// }
    /// // Later, when the user taps "Try again":
    /// try await queue.retry(attachmentId: id)
    /// ```
    ///
    /// - Returns: The attachment as it is now.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``, or
    ///   ``AttachmentError/Code-swift.struct/invalidState`` when it has nothing to retry (or a given-up
    ///   upload's file is gone).
    @discardableResult
    public func retry(attachmentId id: String) async throws -> Attachment {
        try await operation {
            let store = store
            let directory = attachmentsDirectory
            let timestamp = timestamps.next()
            let retried = try await db.writeTransaction { tx -> AttachmentRecord in
                guard let record = try store.record(id: id, in: tx) else {
                    throw AttachmentError(
                        code: .attachmentNotFound, message: "no attachment has id \(String(reflecting: id))",
                        attachmentId: id)
                }
                guard let retried = try Self.requeue(record, timestamp: timestamp, store: store, in: tx) else {
                    let why =
                        record.givenUp == .queuedUpload
                        ? "its upload was given up and its local file is gone"
                        : "it is \(record.state) and no transfer of it was given up or waits for a retry"
                    throw AttachmentError(
                        code: .invalidState, message: "cannot retry attachment \(String(reflecting: id)): \(why)",
                        attachmentId: id)
                }
                return retried
            }
            noteRetried([id])
            return retried.attachment(in: directory)
        }
    }

    /// Queues every given-up transfer again, and runs every transfer waiting for its backoff delay at the
    /// next pass (see ``retry(attachmentId:)``): after the device was offline for long, say.
    ///
    /// - Returns: How many attachments were queued again or brought forward.
    @discardableResult
    public func retryAll() async throws -> Int {
        try await operation {
            let store = store
            let timestamp = timestamps.next()
            let ids = try await db.writeTransaction { tx -> [String] in
                let candidates = try store.retryCandidates(in: tx)
                return try candidates.compactMap { record in
                    try Self.requeue(record, timestamp: timestamp, store: store, in: tx)?.id
                }
            }
            noteRetried(ids)
            return ids.count
        }
    }

    /// Tells the queue that the app's ``KeyProvider`` has new keys (fetched after sign-in, received from
    /// another device, restored from a backup): the transfers that wait for a missing encryption key (see
    /// ``QueueStatus/waitingForKeys``) run at the next pass instead of after their backoff delay.
    ///
    /// ```swift
    /// keychain.store(key, id: "2026-11")
    /// try await queue.keysDidChange()
    /// ```
    ///
    /// - Returns: How many transfers were brought forward.
    @discardableResult
    public func keysDidChange() async throws -> Int {
        try await operation {
            let store = store
            let ids = try await db.writeTransaction { tx in try store.resetKeyUnavailable(in: tx) }
            if !ids.isEmpty {
                logger.debug(
                    "new keys: retrying the transfers that waited for one", metadata: ["count": "\(ids.count)"])
            }
            noteRetried(ids)
            return ids.count
        }
    }

    /// The record queued again (or brought forward), or `nil` when it has nothing to retry.
    private static func requeue(
        _ record: AttachmentRecord, timestamp: Int64, store: AttachmentStore, in tx: SqlTransaction
    ) throws -> AttachmentRecord? {
        var retried = record
        retried.attempts = 0
        retried.nextAttemptAt = nil
        retried.lastError = nil
        retried.givenUp = nil
        if let givenUp = record.givenUp, record.state == .archived {
            if givenUp == .queuedUpload, record.localPath == nil { return nil }
            guard
                try store.transition(
                    id: record.id, from: .archived, to: givenUp, timestamp: timestamp,
                    set: .retryStateCleared + .set(.givenUp, nil), in: tx)
            else { return nil }
            retried.state = givenUp
            retried.timestamp = timestamp
            return retried
        }
        guard [.queuedUpload, .queuedDownload, .queuedDelete].contains(record.state), record.nextAttemptAt != nil
        else { return nil }
        // A retry time only: the state stays (so no trigger fires from the timestamp), the attempts count on.
        guard try store.update(id: record.id, ifState: record.state, set: .set(.nextAttemptAt, nil), in: tx)
        else { return nil }
        retried.attempts = record.attempts
        retried.lastError = record.lastError
        return retried
    }

    /// Lets the downloads that wait for another device's upload (see
    /// ``Configuration/notUploadedYetBackoff``) run at the next pass: a watch emission or ``syncNow()``
    /// suggests the file may be there now. With `minimumSpacing`, does nothing when it last ran less than
    /// that long ago (watch emissions can come many a second).
    func bringForwardAwaitingUploads(minimumSpacing: Duration? = nil) async {
        let now = wallClock.milliseconds()
        if let minimumSpacing, let last = lastAwaitingBringForward,
            now.subtractingClamped(last) < minimumSpacing.clampedMilliseconds
        {
            return
        }
        lastAwaitingBringForward = now
        let store = store
        do {
            let ids = try await db.writeTransaction { tx in try store.bringForwardAwaitingUploads(in: tx) }
            if !ids.isEmpty {
                logger.debug("asking again for files not uploaded yet", metadata: ["count": "\(ids.count)"])
            }
            noteRetried(ids)
        } catch {
            logError("bringing forward downloads that wait for an upload failed", error)
        }
    }

    /// After records were queued again: they may start at the next pass (not held back by an earlier failure
    /// in this round), the next reconcile looks at them, and a pass is asked for.
    private func noteRetried(_ ids: [String]) {
        machine.retried(ids)
        if !ids.isEmpty { trigger() }
    }
}
