import Foundation
import Logging

extension AttachmentQueue {

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
    ///   deleted, ``AttachmentError/Code-swift.struct/remoteUnavailable`` at once while
    ///   ``Configuration/networkConditions`` says the network is unreachable, the transfer's error
    ///   (``AttachmentError/Code-swift.struct/remoteNotFound``,
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
            if machine.isReserved(id) {
                throw AttachmentError(
                    code: .invalidState, message: "attachment \(String(reflecting: id)) is being saved",
                    attachmentId: id)
            }
            if let task = machine.handle(of: id) {
                await task.value
                try Task.checkCancellation()
                continue
            }
            guard machine.network.isReachable else {
                throw AttachmentError(
                    code: .remoteUnavailable,
                    message: "attachment \(String(reflecting: id)) cannot be downloaded: the network is unreachable",
                    attachmentId: id)
            }
            // It takes a slot: when all are taken, the lowest-priority background transfer pauses for it
            // (a download keeps its partial file, an upload its parts) and runs again after.
            if let paused = machine.pauseTransfer(for: 4) {
                logger.debug(
                    "pausing a transfer for a download asked for", metadata: ["paused": "\(paused.id)", "for": "\(id)"])
                paused.handle.cancel()
            }
            return try await wait(for: startSharedDownload(record), id: id)
        }
        throw AttachmentError(
            code: .invalidState,
            message: "attachment \(String(reflecting: id)) kept changing while waiting to download it",
            attachmentId: id)
    }

    /// Moves an attachment's pending transfer ahead of every other: the app needs it soon (its cell scrolled
    /// into view, say).
    ///
    /// It starts at once when a slot is free; when every slot is taken, the lowest-priority background
    /// transfer pauses for it (a download keeps its partial file, an upload its parts, and both run again
    /// after). Its retry time and an earlier failure are not waited for. The raise lasts until its transfer
    /// ends; an attachment with nothing to transfer, or a queue not syncing, is left as it is until a pass
    /// finds it queued.
    ///
    /// Priorities, highest first: a download asked for with ``download(attachmentId:)``, a raised attachment,
    /// this device's uploads and deletes, then the downloads the queue makes by itself.
    ///
    /// ```swift
    /// func cellWillAppear(photoId: String) async {
    ///     try? await queue.raisePriority(attachmentId: photoId)
    /// }
    /// ```
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/closed`` after
    ///   ``close()``; startup errors.
    public func raisePriority(attachmentId id: String) async throws {
        try await waitForInit()
        try ensureOpen()
        await run(machine.raise(id))
    }

    /// How many callers wait for the download of `id` asked for (for tests).
    func downloadWaiters(for id: String) -> Int {
        sharedDownloads[id]?.waiters.count ?? 0
    }

    func readRecord(_ id: String) async throws -> AttachmentRecord? {
        let store = store
        return try await db.readTransaction { tx in try store.record(id: id, in: tx) }
    }

    /// Marks the content as used now, for least-recently-used eviction.
    private func touch(_ id: String) async throws {
        let store = store
        let now = wallClock.milliseconds()
        try await db.writeTransaction { tx in try store.touch(id: id, at: now, in: tx) }
    }

    private func startSharedDownload(_ record: AttachmentRecord) -> SharedDownload {
        let shared = SharedDownload()
        let worker = makeTransferWorker()
        let task = Task {
            let report = await worker.perform(record, onDemand: true)
            await self.sharedDownloadFinished(record, report: report)
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

    private func sharedDownloadFinished(_ record: AttachmentRecord, report: TransferReport) async {
        let shared = sharedDownloads[record.id]
        sharedDownloads[record.id] = nil
        let result: Result<Attachment, any Error>
        switch report {
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
        case .failedOnRequest(let error):
            result = .failure(error)
        case .failed(let failure):
            result = .failure(failure.error)
        }
        for waiter in (shared?.waiters ?? [:]).values { waiter.resume(with: result) }
        await transferFinished(record, report: report)
        // New content may take the cache over its budget: a pass enforces it (while syncing).
        if case .completed = report, configuration.maxCacheBytes != nil { trigger() }
    }
}
