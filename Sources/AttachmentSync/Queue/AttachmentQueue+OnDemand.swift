import Foundation

extension AttachmentQueue {
    // MARK: - Downloading on request

    /// Fetches one attachment's content now, whatever the download policy, and returns the attachment once
    /// its bytes are on disk and verified.
    ///
    /// - When the content is already on this device, it returns at once.
    /// - Concurrent calls for the same attachment share one transfer, and all get its result.
    /// - An interrupted download (cancelled, failed, the process killed) continues from the bytes already
    ///   fetched the next time, when the remote supports ranged reads. The partial file keeps a temporary
    ///   name until it is complete and verified.
    /// - Cancelling the calling task stops waiting; the transfer itself stops when no other caller is
    ///   still waiting for it.
    /// - It runs whether or not sync is started, and beside the transfers counted by
    ///   ``Configuration/maxConcurrentTransfers``; ``stopSync()`` leaves it running, ``close()`` stops it.
    ///
    /// ```swift
    /// let video = try await queue.download(attachmentId: id)
    /// player.play(URL(fileURLWithPath: video.localUri!))
    /// ```
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``
    ///   when no attachment has the id, ``AttachmentError/Code-swift.struct/invalidState`` when it is being
    ///   deleted, the transfer's error (``AttachmentError/Code-swift.struct/remoteNotFound``,
    ///   ``AttachmentError/Code-swift.struct/integrityMismatch``, …), or `CancellationError`.
    @discardableResult
    public func download(attachmentId id: String) async throws -> Attachment {
        try await waitForInit()
        // A transfer of another kind in flight (an upload, an eager download) is waited for, then the
        // record looked at again; bounded, as each round waits for a transfer to end.
        for _ in 0..<8 {
            try ensureOpen()
            guard let record = try await readRecord(id) else {
                throw AttachmentError(
                    code: .attachmentNotFound, message: "no attachment has id \(String(reflecting: id))",
                    attachmentId: id)
            }
            if record.state == .queuedDelete {
                throw AttachmentError(
                    code: .invalidState, message: "attachment \(String(reflecting: id)) is being deleted",
                    attachmentId: id)
            }
            if record.localPath != nil {
                try await touch(id)
                return record.attachment(in: attachmentsDirectory)
            }
            if let shared = sharedDownloads[id] {
                guard shared.abandoned else { return try await wait(for: shared, id: id) }
                // Its callers all gave up and it is winding down: wait for that, then look again (its bytes
                // may have arrived anyway; if not, a fresh download starts).
                await shared.task?.value
                try Task.checkCancellation()
                continue
            }
            if machine.reserved.contains(id) {
                throw AttachmentError(
                    code: .invalidState, message: "attachment \(String(reflecting: id)) is being saved",
                    attachmentId: id)
            }
            if let task = machine.handle(of: id) {
                await task.value
                try Task.checkCancellation()
                continue
            }
            return try await wait(for: startSharedDownload(record), id: id)
        }
        throw AttachmentError(
            code: .invalidState,
            message: "attachment \(String(reflecting: id)) kept changing while waiting to download it",
            attachmentId: id)
    }

    /// How many callers wait for the download of `id` asked for (for tests).
    func downloadWaiters(for id: String) -> Int {
        sharedDownloads[id]?.waiters.count ?? 0
    }

    private func readRecord(_ id: String) async throws -> AttachmentRecord? {
        let store = store
        return try await db.readTransaction { tx in try store.record(id: id, in: tx) }
    }

    /// Marks the content as used now, for least-recently-used eviction.
    private func touch(_ id: String) async throws {
        let store = store
        let now = Self.milliseconds(configuration.currentDate())
        try await db.writeTransaction { tx in
            _ = try tx.execute(
                sql: "UPDATE \(store.table) SET last_used_at = ? WHERE id = ?", parameters: [now, id])
        }
    }

    private func startSharedDownload(_ record: AttachmentRecord) -> SharedDownload {
        let shared = SharedDownload()
        let context = makeTransferContext()
        let task = Task {
            let outcome = await Self.perform(record, context: context, onDemand: true)
            await self.sharedDownloadFinished(record, outcome: outcome)
        }
        shared.task = task
        sharedDownloads[record.id] = shared
        machine.startedOnRequest(record.id, state: record.state, handle: task)
        return shared
    }

    private func wait(for shared: SharedDownload, id: String) async throws -> Attachment {
        nextWaiterToken += 1
        let token = nextWaiterToken
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                // Runs on the actor before suspending: the download cannot have finished in between.
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                    dropWaiter(token, of: id)
                } else {
                    shared.waiters[token] = continuation
                }
            }
        } onCancel: {
            Task { await self.dropWaiter(token, of: id) }
        }
    }

    /// A caller stopped waiting: it gets `CancellationError`, and the transfer is cancelled when nobody
    /// else waits for it.
    private func dropWaiter(_ token: Int, of id: String) {
        guard let shared = sharedDownloads[id] else { return }
        shared.waiters.removeValue(forKey: token)?.resume(throwing: CancellationError())
        if shared.waiters.isEmpty {
            shared.abandoned = true
            shared.task?.cancel()
        }
    }

    private func sharedDownloadFinished(_ record: AttachmentRecord, outcome: TransferOutcome) async {
        let shared = sharedDownloads[record.id]
        sharedDownloads[record.id] = nil
        let result: Result<Attachment, any Error>
        switch outcome {
        case .completed:
            do {
                if let attachment = try await readRecord(record.id)?.attachment(in: attachmentsDirectory) {
                    result = .success(attachment)
                } else {
                    result = .failure(
                        AttachmentError(
                            code: .attachmentNotFound, message: "attachment \(record.id) was deleted meanwhile",
                            attachmentId: record.id))
                }
            } catch {
                result = .failure(error)
            }
        case .cancelled:
            result = .failure(CancellationError())
        case .superseded:
            result = .failure(
                AttachmentError(
                    code: .invalidState,
                    message: "attachment \(String(reflecting: record.id)) changed while it downloaded",
                    attachmentId: record.id))
        case .failedOnRequest(let error), .willRetry(let error, _, _), .archived(let error, _):
            result = .failure(error)
        }
        for waiter in (shared?.waiters ?? [:]).values { waiter.resume(with: result) }
        await transferFinished(record, outcome: outcome)
        // New content may take the cache over its budget: a pass enforces it (while syncing).
        if case .completed = outcome, configuration.maxCacheBytes != nil { trigger() }
    }

    // MARK: - Purging and pinning

    /// Deletes an attachment's local content but keeps its record, remote-only: ``Attachment/contentAvailable``
    /// becomes `false`, and ``download(attachmentId:)`` fetches it again. The remote copy is never touched.
    ///
    /// Purging an attachment without local content does nothing.
    ///
    /// - Returns: The attachment as it is now.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``, or
    ///   ``AttachmentError/Code-swift.struct/invalidState`` when the content is not uploaded yet (purging
    ///   it would lose the only copy) or the attachment is being deleted.
    @discardableResult
    public func purge(attachmentId id: String) async throws -> Attachment {
        try await operation {
            guard let record = try await readRecord(id) else {
                throw AttachmentError(
                    code: .attachmentNotFound, message: "no attachment has id \(String(reflecting: id))",
                    attachmentId: id)
            }
            guard record.state == .synced || record.state == .archived, !record.isLocalOnly else {
                let why =
                    record.state == .queuedUpload || record.isLocalOnly
                    ? "is not uploaded yet: its local file is the only copy" : "is \(record.state)"
                throw AttachmentError(
                    code: .invalidState, message: "cannot purge attachment \(String(reflecting: id)): it \(why)",
                    attachmentId: id)
            }
            guard let relative = record.localPath else { return record.attachment(in: attachmentsDirectory) }
            guard try await removeContent(of: record, relative: relative) else {
                throw AttachmentError(
                    code: .invalidState, message: "attachment \(String(reflecting: id)) changed while purging it",
                    attachmentId: id)
            }
            eventCenter.send(.purged(attachmentId: id))
            var purged = record
            purged.localPath = nil
            return purged.attachment(in: attachmentsDirectory)
        }
    }

    /// Clears a record's `local_uri` (only if it is unchanged), then deletes the file. A crash in between
    /// leaves a file no record refers to, which startup removes.
    func removeContent(of record: AttachmentRecord, relative: String) async throws -> Bool {
        let store = store
        let cleared = try await db.writeTransaction { tx in
            try tx.execute(
                sql: "UPDATE \(store.table) SET local_uri = NULL "
                    + "WHERE id = ? AND state = ? AND local_uri = ? AND coalesce(has_synced, 0) = 1",
                parameters: [record.id, record.state.rawValue, relative]) == 1
        }
        guard cleared else { return false }
        machine.noteChanged(record.id)
        try await localStorage.deleteFile(filePath: localPath(relative))
        return true
    }

    /// Exempts an attachment's local content from eviction under ``Configuration/maxCacheBytes``.
    ///
    /// Pinning does not fetch anything: pin an on-demand attachment and ``download(attachmentId:)`` it to
    /// keep it available offline.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``.
    public func pin(attachmentId id: String) async throws {
        try await setPinned(true, id)
    }

    /// Makes an attachment's local content evictable again (see ``pin(attachmentId:)``).
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``.
    public func unpin(attachmentId id: String) async throws {
        try await setPinned(false, id)
    }

    private func setPinned(_ pinned: Bool, _ id: String) async throws {
        try await operation { try await writePinned(pinned, id) }
    }

    private func writePinned(_ pinned: Bool, _ id: String) async throws {
        let store = store
        let changed = try await db.writeTransaction { tx in
            try tx.execute(sql: "UPDATE \(store.table) SET pinned = ? WHERE id = ?", parameters: [pinned, id])
        }
        guard changed == 1 else {
            throw AttachmentError(
                code: .attachmentNotFound, message: "no attachment has id \(String(reflecting: id))", attachmentId: id)
        }
    }

    // MARK: - Progress and events

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
        guard machine.transfers[id] == nil else { return }
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
