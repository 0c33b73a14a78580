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
            let record = try await readRecord(id)
            switch machine.downloadAsked(id, record: record) {
            case .present(let record):
                try await touch(id)
                return record.attachment(in: attachmentsDirectory)
            case .join(let token):
                return try await waitForDownload(token, of: id)
            case .awaitTransfer(let task):
                await task.value
                try Task.checkCancellation()
            case .start(let record, let token, let pausing):
                perform([.cancel(pausing)])
                startDownloadOnRequest(record)
                return try await waitForDownload(token, of: id)
            case .refuse(let refusal):
                throw Self.downloadRefused(id, refusal)
            }
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
    func downloadWaiters(for id: String) -> Int { machine.downloadWaiterCount(of: id) }

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

    private static func downloadRefused(_ id: String, _ refusal: OnDemandDownloads.Refusal) -> AttachmentError {
        let name = String(reflecting: id)
        return switch refusal {
        case .notFound:
            AttachmentError(code: .attachmentNotFound, message: "no attachment has id \(name)", attachmentId: id)
        case .beingDeleted:
            AttachmentError(code: .invalidState, message: "attachment \(name) is being deleted", attachmentId: id)
        case .beingSaved:
            AttachmentError(code: .invalidState, message: "attachment \(name) is being saved", attachmentId: id)
        case .networkUnreachable:
            AttachmentError(
                code: .remoteUnavailable,
                message: "attachment \(name) cannot be downloaded: the network is unreachable", attachmentId: id)
        }
    }

    /// Starts the download `.start` of ``QueueStateMachine/downloadAsked(_:record:)`` called for; its end
    /// hands the result to every caller still waiting.
    private func startDownloadOnRequest(_ record: AttachmentRecord) {
        let worker = makeTransferWorker()
        let telemetry = telemetry
        let task = Task {
            let report = await telemetry.traced(.download, id: record.id) {
                await worker.perform(record, onDemand: true)
            }
            await self.downloadOnRequestFinished(record, report: report)
        }
        machine.startedOnRequest(record.id, state: record.state, handle: task)
    }

    /// Suspends as the caller with `token` until the download of `id` ends.
    private func waitForDownload(_ token: Int, of id: String) async throws -> Attachment {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { continuation in
                // Runs on the actor before suspending: the download cannot have finished in between.
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                    dropWaiter(token, of: id)
                } else {
                    onDemandWaiters[token] = continuation
                }
            }
        } onCancel: {
            Task { await self.dropWaiter(token, of: id) }
        }
    }

    /// A caller stopped waiting: it gets `CancellationError`, and the download is cancelled when nobody
    /// else waits for it.
    private func dropWaiter(_ token: Int, of id: String) {
        onDemandWaiters.removeValue(forKey: token)?.resume(throwing: CancellationError())
        perform(machine.downloadWaiterLeft(token, of: id))
    }

    private func downloadOnRequestFinished(_ record: AttachmentRecord, report: TransferReport) async {
        let tokens = machine.downloadEnded(record.id)
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
        case .cancelled, .handedOff:
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
        for token in tokens { onDemandWaiters.removeValue(forKey: token)?.resume(with: result) }
        await transferFinished(record, report: report)
        // New content may take the cache over its budget: a pass enforces it (while syncing).
        if case .completed = report, configuration.maxCacheBytes != nil { trigger() }
    }
}
