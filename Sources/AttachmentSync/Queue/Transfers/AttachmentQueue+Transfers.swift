import Foundation
import Logging

extension AttachmentQueue {
    /// What became of one transfer, once booked.
    enum TransferOutcome: Sendable {
        /// Done and committed; `bytes` moved (0 for a delete).
        case completed(bytes: Int64)
        /// Done, but the record had changed meanwhile (deleted, archived, re-queued): nothing committed.
        case superseded
        /// Interrupted by `stopSync`, `close`, a newer decision, or the network gone; not an error.
        case cancelled
        /// Failed; its outcome (a retry, a wait or giving up) booked, or not (`booked` false: the write
        /// failed, and the record is as it was).
        case failed(any Error, FailureOutcome, booked: Bool)
        /// A download asked for on demand failed; nothing is booked (the caller decides what to do).
        case failedOnRequest(any Error)
        /// Handed to the background transfer service; its result is adopted later.
        case handedOff
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
            wallClock: wallClock, progress: progressCenter, files: files, throttles: throttles,
            network: networkNow, committer: downloadCommitter, uploadCommitter: uploadCommitter,
            localFiles: localFilePolicy)
    }

    /// Starts the transfer the record's state calls for. The caller has checked that none is in flight for
    /// this attachment.
    func startTransfer(_ record: AttachmentRecord) {
        var worker = makeTransferWorker()
        worker.handOff = handOffContext
        // A transfer an app raised is waited for: it runs here, at once.
        let mayHandOff = handOffContext != nil && !machine.raisedIDs.contains(record.id)
        let telemetry = telemetry
        let task = Task {
            let report = await telemetry.traced(TransferKind(record.state), id: record.id) {
                await worker.perform(record, mayHandOff: mayHandOff)
            }
            await self.transferFinished(record, report: report)
        }
        machine.started(record.id, handle: task)
    }

    /// Books what a transfer did (see ``book(_:of:)``), then keeps the queue moving: the next queued
    /// attachments start at once (while syncing or during `syncNow`), and idle waiters are released when
    /// nothing is left in flight.
    func transferFinished(_ record: AttachmentRecord, report finished: TransferReport) async {
        let outcome = await book(finished, of: record)
        if case .failed(_, .wait(.localFiles, _, _), _) = outcome {
            progressCenter.noteLocalFiles(outOfReach: true)
        }
        if case .completed = outcome, machine.noteLocalFilesReached() {
            progressCenter.noteLocalFiles(outOfReach: false)
            await restartLocalFileWaits()
        }
        let next = machine.transferFinished(record.id, state: record.state, outcome: outcome)
        progressCenter.noteConcurrency(machine.maxConcurrentTransfers, maximum: configuration.maxConcurrentTransfers)
        telemetry.concurrency.record(machine.maxConcurrentTransfers)
        telemetry.record(outcome, kind: TransferKind(record.state), now: wallClock.milliseconds())
        report(outcome, of: record, kind: TransferKind(record.state))
        switch outcome {
        case .completed, .superseded, .cancelled, .handedOff:
            break
        case .failed(let error, .giveUp, true):
            logError("\(record.state) failed; the attachment was archived", error, id: record.id)
        case .failed(let error, _, _):
            logError("\(record.state) failed; it will be retried", error, id: record.id)
        case .failedOnRequest(let error):
            logError("a download asked for failed", error, id: record.id)
        }
        if case .cancelled = outcome, TransferKind(record.state) == .download {
            // In a task of its own: this one is cancelled, and its database reads would fail.
            await Task { await self.discardUnwantedPartial(of: record) }.value
        }
        await run(next)
        perform(machine.resumeIfIdle())
    }

    /// Books a transfer's report: a failure's outcome is the state machine's decision
    /// (``QueueStateMachine/failureOutcome(_:of:now:)``), written by the store while the transfer still
    /// holds its slot, so no other transfer of the record can start before its retry time is in place. A
    /// given-up upload lets the remote forget its partial upload.
    func book(_ report: TransferReport, of record: AttachmentRecord) async -> TransferOutcome {
        switch report {
        case .completed(let bytes): return .completed(bytes: bytes)
        case .superseded: return .superseded
        case .cancelled: return .cancelled
        case .handedOff: return .handedOff
        case .failedOnRequest(let error): return .failedOnRequest(error)
        case .failed(let failure):
            var generator = SystemRandomNumberGenerator()
            let decision = machine.failureOutcome(
                failure, of: record, now: wallClock.milliseconds(), using: &generator)
            switch decision {
            case .interrupted:
                logger.debug(
                    "a transfer failed while the network is unreachable; not counted",
                    metadata: ["attachment": "\(record.id)", "error": "\(failure.error)"])
                return .cancelled
            case .wait(let reason, _, _):
                logger.debug(
                    reason == .network
                        ? "a transfer got no answer from remote storage; not counted"
                        : "a transfer could not reach its local files; it waits for them, not counted",
                    metadata: ["attachment": "\(record.id)", "error": "\(failure.error)"])
            case .giveUp(let attempts, _, true):
                logger.error(
                    "giving up after \(attempts) failed attempts",
                    metadata: ["attachment": "\(record.id)", "error": "\(failure.error)"])
            case .giveUp where failure.kind == .conflict:
                logger.warning(
                    "remote storage holds other content under this attachment's name; the upload is given up",
                    metadata: ["attachment": "\(record.id)"])
            case .retry, .awaitUpload, .giveUp:
                break
            }
            let store = store
            let timestamp = timestamps.next()
            let booked: Bool
            do {
                // In a task of its own: this transfer's task may have been cancelled meanwhile, and a
                // cancelled task's database writes fail at once.
                booked = try await Task {
                    try await db.writeTransaction { tx in
                        try store.book(decision, of: record, error: failure.error, timestamp: timestamp, in: tx)
                    }
                }.value
            } catch {
                logError("booking a failed transfer failed", error, id: record.id)
                return .failed(failure.error, decision, booked: false)
            }
            guard case .giveUp = decision else { return .failed(failure.error, decision, booked: true) }
            // Not archived: the record changed meanwhile, and what it is now stands.
            guard booked else { return .superseded }
            if record.state == .queuedUpload {
                try? await remoteStorage.discardPartialUpload(attachment: record.attachment(in: attachmentsDirectory))
            }
            return .failed(failure.error, decision, booked: true)
        }
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
    /// (then it is kept, to resume). When the record cannot be read, the partial file is kept too: startup's
    /// clean-up removes it if it turns out to be unwanted.
    func discardUnwantedPartial(of record: AttachmentRecord) async {
        guard let localName = try? record.localName() else { return }
        let store = store
        let current: AttachmentRecord?
        do {
            current = try await db.readTransaction { tx in try store.record(id: record.id, in: tx) }
        } catch {
            logError(
                "reading the record of an interrupted download failed; its partial file is kept", error,
                id: record.id)
            return
        }
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
        case .handedOff:
            progressCenter.end(id, status: .handedOff)
            eventCenter.send(.handedOff(attachmentId: id))
        case .failed(let error, let decision, let booked):
            let typed = AttachmentError.wrapping(error, attachmentId: id)
            progressCenter.end(id, status: .failed(typed))
            switch decision {
            case .giveUp(let attempts, _, _) where booked:
                eventCenter.send(.gaveUp(attachmentId: id, error: typed, attempts: attempts))
            case .retry(let attempt, _):
                let date = booked ? decision.retryAt.map(WallClock.date(milliseconds:)) : nil
                eventCenter.send(.failed(attachmentId: id, error: typed, attempt: attempt, retryAt: date))
            default:
                // A failure that spent no attempt reports the attempt count the record has.
                let date = booked ? decision.retryAt.map(WallClock.date(milliseconds:)) : nil
                let attempt = if case .giveUp(let attempts, _, _) = decision { attempts } else { record.attempts }
                eventCenter.send(.failed(attachmentId: id, error: typed, attempt: attempt, retryAt: date))
            }
        case .failedOnRequest(let error):
            let typed = AttachmentError.wrapping(error, attachmentId: id)
            progressCenter.end(id, status: .failed(typed))
            eventCenter.send(.failed(attachmentId: id, error: typed, attempt: record.attempts + 1, retryAt: nil))
        }
    }
}
