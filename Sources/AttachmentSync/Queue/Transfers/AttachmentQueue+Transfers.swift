import Foundation
import Logging

extension AttachmentQueue {
    /// What became of one transfer.
    enum TransferOutcome: Sendable {
        /// Done and committed; `bytes` moved (0 for a delete).
        case completed(bytes: Int64)
        /// Done, but the record had changed meanwhile (deleted, archived, re-queued): nothing committed.
        case superseded
        /// Interrupted by `stopSync`, `close` or a newer decision; not an error.
        case cancelled
        /// Failed for the `attempt`-th time; the error handler (or the default) chose to retry, not before
        /// `retryAt` (milliseconds since 1970) when set.
        case willRetry(any Error, attempt: Int, retryAt: Int64?)
        /// Failed in a way that is no failed try (see ``TransferWorker/WaitReason``): waits, not before
        /// `retryAt` when set, its `attempt` count unchanged.
        case waiting(any Error, reason: TransferWorker.WaitReason, attempt: Int, retryAt: Int64?)
        /// Failed and archived after `attempts` tries (by the error handler, `maxAttempts`, or because the
        /// local file to upload is gone).
        case archived(any Error, attempts: Int)
        /// A download asked for on demand failed; nothing is booked (the caller decides what to do).
        case failedOnRequest(any Error)
    }

    /// What a transfer does: by the record's state, except that a download asked for on demand runs on a
    /// record in any state without content.
    enum TransferKind: Sendable {
        case upload, download, delete

        init(_ state: AttachmentState) {
            switch state {
            case .queuedUpload: self = .upload
            case .queuedDelete: self = .delete
            case .queuedDownload, .synced, .archived: self = .download
            }
        }
    }

    func makeTransferWorker() -> TransferWorker {
        TransferWorker(
            db: db, store: store, remote: remoteStorage, local: localStorage, errorHandler: errorHandler,
            directory: attachmentsDirectory, directoryPath: attachmentsPath, timestamps: timestamps, logger: logger,
            failurePolicy: FailurePolicy(
                retryBackoff: configuration.retryBackoff, maxAttempts: configuration.maxAttempts,
                notUploadedYetBackoff: configuration.notUploadedYetBackoff),
            wallClock: wallClock, progress: progressCenter, files: files, throttles: throttles,
            network: networkNow, committer: downloadCommitter, localFiles: localFilePolicy)
    }

    /// Starts the transfer the record's state calls for. The caller has checked that none is in flight for
    /// this attachment.
    func startTransfer(_ record: AttachmentRecord) {
        let worker = makeTransferWorker()
        let task = Task {
            let outcome = await worker.perform(record)
            await self.transferFinished(record, outcome: outcome)
        }
        machine.started(record.id, handle: task)
    }

    /// Books a finished transfer and keeps the queue moving: the next queued attachments start at once
    /// (while syncing or during `syncNow`), and idle waiters are released when nothing is left in flight.
    func transferFinished(_ record: AttachmentRecord, outcome: TransferOutcome) async {
        let finish: Machine.Finish
        switch outcome {
        case .cancelled: finish = .cancelled
        case .willRetry(let error, _, _):
            finish = AdaptiveConcurrency.isOverload(error) ? .refused : .willRetry
        case .waiting(_, let reason, _, _):
            if reason == .localFiles {
                machine.noteLocalFilesOutOfReach()
                progressCenter.noteLocalFiles(outOfReach: true)
            }
            finish = .willRetry
        case .completed, .superseded, .archived, .failedOnRequest: finish = .done
        }
        if case .completed = outcome, machine.noteLocalFilesReached() {
            progressCenter.noteLocalFiles(outOfReach: false)
            await restartLocalFileWaits()
        }
        let next = machine.transferFinished(record.id, state: record.state, finish)
        progressCenter.noteConcurrency(machine.maxConcurrentTransfers, maximum: configuration.maxConcurrentTransfers)
        report(outcome, of: record, kind: TransferKind(record.state))
        switch outcome {
        case .completed, .superseded, .cancelled:
            break
        case .willRetry(let error, _, _), .waiting(let error, _, _, _):
            logError("\(record.state) failed; it will be retried", error, id: record.id)
        case .archived(let error, _):
            logError("\(record.state) failed; the attachment was archived", error, id: record.id)
        case .failedOnRequest(let error):
            logError("a download asked for failed", error, id: record.id)
        }
        if case .cancelled = outcome, TransferKind(record.state) == .download {
            // In a task of its own: this one is cancelled, and its database reads would fail.
            await Task { await self.discardUnwantedPartial(of: record) }.value
        }
        if let read = next.read {
            // In a task of its own: this transfer's task may have been cancelled (by stopSync, before sync
            // was started again), and a cancelled task's database reads fail at once.
            await Task { await self.startQueuedTransfers(read) }.value
        }
        for waiter in next.resume + machine.resumeIfIdle() { waiter.resume() }
    }

    /// A transfer reached the local files again after others could not: those run at once, their backoff
    /// started over.
    func restartLocalFileWaits() async {
        let store = store
        do {
            let reset = try await db.writeTransaction { tx in try store.resetLocalUnavailable(in: tx) }
            if reset > 0 {
                logger.info(
                    "the local files are in reach again: retrying the transfers that waited for them",
                    metadata: ["count": "\(reset)"])
                trigger()
            }
        } catch {
            logError("restarting the transfers that waited for the local files failed", error)
        }
    }

    /// Removes the partial file of an interrupted download unless its attachment still waits for content
    /// (then it is kept, to resume).
    func discardUnwantedPartial(of record: AttachmentRecord) async {
        guard let localName = try? record.localName() else { return }
        let store = store
        let current = try? await db.readTransaction { tx in try store.record(id: record.id, in: tx) }
        if let current, current.localPath == nil, current.state == .queuedDownload || current.state == .synced {
            return
        }
        let partial = FileName.downloadingName(for: localName)
        try? await localStorage.deleteFile(filePath: localPath(partial))
        try? await localStorage.deleteFile(filePath: localPath(FileName.resumeValidatorName(for: partial)))
    }

    /// Ends the transfer's progress stream and sends its event.
    func report(_ outcome: TransferOutcome, of record: AttachmentRecord, kind: TransferKind) {
        let id = record.id
        switch outcome {
        case .completed(let bytes):
            progressCenter.end(id, status: .finished)
            switch kind {
            case .upload: eventCenter.send(.uploaded(attachmentId: id, bytes: bytes))
            case .download: eventCenter.send(.downloaded(attachmentId: id, bytes: bytes))
            case .delete: eventCenter.send(.deleted(attachmentId: id))
            }
        case .superseded, .cancelled:
            progressCenter.end(id, status: .cancelled)
        case .willRetry(let error, let attempt, let retryAt), .waiting(let error, _, let attempt, let retryAt):
            let typed = AttachmentError.wrapping(error, attachmentId: id)
            progressCenter.end(id, status: .failed(typed))
            let date = retryAt.map(WallClock.date(milliseconds:))
            eventCenter.send(.failed(attachmentId: id, error: typed, attempt: attempt, retryAt: date))
        case .archived(let error, let attempts):
            let typed = AttachmentError.wrapping(error, attachmentId: id)
            progressCenter.end(id, status: .failed(typed))
            eventCenter.send(.gaveUp(attachmentId: id, error: typed, attempts: attempts))
        case .failedOnRequest(let error):
            let typed = AttachmentError.wrapping(error, attachmentId: id)
            progressCenter.end(id, status: .failed(typed))
            eventCenter.send(.failed(attachmentId: id, error: typed, attempt: record.attempts + 1, retryAt: nil))
        }
    }

    /// Columns that clear a transfer's retry state once it succeeds.
    static let retryStateCleared: [(column: String, value: (any SqlValueConvertible)?)] = [
        ("attempts", 0), ("next_attempt_at", nil), ("last_error", nil), ("awaiting_upload", nil),
        ("connectivity_failure", nil), ("local_unavailable", nil),
    ]
}
