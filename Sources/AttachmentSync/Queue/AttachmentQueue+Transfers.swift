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

    /// Everything a transfer needs, so it runs off the actor.
    struct TransferContext: Sendable {
        let db: LocalDatabase
        let store: AttachmentStore
        let remote: any RemoteStorageAdapter
        let local: any LocalStorageAdapter
        let errorHandler: (any SyncErrorHandler)?
        let directory: URL
        let timestamps: MonotonicTimestamps
        let logger: Logger
        let failurePolicy: FailurePolicy
        let currentDate: @Sendable () -> Date
        let progress: ProgressCenter
        let files: any FileOperations
    }

    func makeTransferContext() -> TransferContext {
        TransferContext(
            db: db, store: store, remote: remoteStorage, local: localStorage, errorHandler: errorHandler,
            directory: attachmentsDirectory, timestamps: timestamps, logger: logger,
            failurePolicy: FailurePolicy(
                retryBackoff: configuration.retryBackoff, maxAttempts: configuration.maxAttempts),
            currentDate: configuration.currentDate, progress: progressCenter, files: files
        )
    }

    /// Starts the transfer the record's state calls for. The caller has checked that none is in flight for
    /// this attachment.
    func startTransfer(_ record: AttachmentRecord) {
        let context = makeTransferContext()
        let task = Task {
            let outcome = await Self.perform(record, context: context)
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
        case .willRetry: finish = .willRetry
        case .completed, .superseded, .archived, .failedOnRequest: finish = .done
        }
        let next = machine.transferFinished(record.id, state: record.state, finish)
        report(outcome, of: record, kind: TransferKind(record.state))
        switch outcome {
        case .completed, .superseded, .cancelled:
            break
        case .willRetry(let error, _, _):
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
        case .willRetry(let error, let attempt, let retryAt):
            let typed = AttachmentError.wrapping(error, attachmentId: id)
            progressCenter.end(id, status: .failed(typed))
            let date = retryAt.map { Date(timeIntervalSince1970: Double($0) / 1000) }
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

    /// Runs one transfer and commits its result, off the actor. `onDemand` runs a download whatever the
    /// record's state (a remote-only `synced` or `archived` record, say).
    nonisolated static func perform(
        _ record: AttachmentRecord, context: TransferContext, onDemand: Bool = false
    ) async -> TransferOutcome {
        let attachment = record.attachment(in: context.directory)
        do {
            try Task.checkCancellation()
            if onDemand {
                do {
                    return try await download(record, attachment, context)
                } catch {
                    if Task.isCancelled || error is CancellationError { return .cancelled }
                    return .failedOnRequest(error)
                }
            }
            switch record.state {
            case .queuedUpload: return try await upload(record, attachment, context)
            case .queuedDownload: return try await download(record, attachment, context)
            case .queuedDelete: return try await delete(record, attachment, context)
            case .synced, .archived: return .superseded
            }
        } catch {
            if Task.isCancelled || error is CancellationError { return .cancelled }
            return await handleFailure(record, attachment, error, context)
        }
    }

    /// Columns that clear a transfer's retry state once it succeeds.
    static let retryStateCleared: [(column: String, value: (any SqlValueConvertible)?)] = [
        ("attempts", 0), ("next_attempt_at", nil), ("last_error", nil),
    ]

    private nonisolated static func upload(
        _ record: AttachmentRecord, _ attachment: Attachment, _ context: TransferContext
    ) async throws -> TransferOutcome {
        guard let path = attachment.localUri, try await context.local.fileExists(filePath: path) else {
            // The only copy is gone: there is nothing to upload, ever.
            let error = AttachmentError(
                code: .localFileNotFound,
                message: "the file to upload is missing", attachmentId: record.id, path: attachment.localUri)
            return try await giveUp(record, because: error, clearingLocalPath: true, context)
        }
        let id = record.id
        let size: Int64
        if let url = context.local.plainFileURL(filePath: path) {
            size = try await context.local.fileSize(filePath: path) ?? record.size ?? 0
            context.progress.begin(id, direction: .upload, totalBytes: size)
            try await context.remote.uploadFile(fileURL: url, attachment: attachment) {
                context.progress.report(id, $0)
            }
        } else {
            let data = try await context.local.readFile(filePath: path, mediaType: record.mediaType)
            size = Int64(data.count)
            context.progress.begin(id, direction: .upload, totalBytes: size)
            try await context.remote.uploadFile(data: data, attachment: attachment)
        }
        let store = context.store
        let timestamp = context.timestamps.next()
        let committed = try await context.db.writeTransaction { tx in
            try store.transition(
                id: record.id, from: .queuedUpload, to: .synced, timestamp: timestamp,
                set: [("has_synced", true), ("size", size)] + retryStateCleared, in: tx)
        }
        context.logger.debug("uploaded", metadata: ["attachment": "\(record.id)", "bytes": "\(size)"])
        return committed ? .completed(bytes: size) : .superseded
    }

    /// Downloads to a partial file under a temporary name, verifies it, moves it into place and commits.
    ///
    /// The partial file survives cancellation and failures other than a mismatch or a missing remote
    /// file: when the remote supports ranged reads, the next try continues from its end. Attachments are
    /// immutable (a new file gets a new id), so the bytes already there are the start of the same content;
    /// the adapter starts over when it sees the object changed, and the whole file is checked anyway.
    private nonisolated static func download(
        _ record: AttachmentRecord, _ attachment: Attachment, _ context: TransferContext
    ) async throws -> TransferOutcome {
        let localName = try record.localName()
        let finalPath = context.directory.appendingPathComponent(localName).path
        let stagingPath = context.directory.appendingPathComponent(FileName.downloadingName(for: localName)).path
        let id = record.id

        do {
            let (size, sha256): (Int64, String)
            if let staging = context.local.plainFileURL(filePath: stagingPath) {
                let partial = try await context.local.fileSize(filePath: stagingPath) ?? 0
                let info: RemoteObjectInfo
                if partial > 0, context.remote.supportsRangedDownloads {
                    context.progress.begin(id, direction: .download, completedBytes: partial, totalBytes: record.size)
                    context.logger.debug(
                        "resuming a download", metadata: ["attachment": "\(id)", "offset": "\(partial)"])
                    info = try await context.remote.downloadFile(attachment: attachment, into: staging, from: partial) {
                        context.progress.report(id, $0)
                    }
                } else {
                    try await context.local.deleteFile(filePath: stagingPath)
                    context.progress.begin(id, direction: .download, totalBytes: record.size)
                    info = try await context.remote.downloadFile(attachment: attachment, into: staging, from: 0) {
                        context.progress.report(id, $0)
                    }
                }
                try context.files.synchronizeFile(atPath: stagingPath)
                (size, sha256) = try await context.files.digest(ofFileAt: stagingPath)
                try verify(size: size, sha256: sha256, of: record, remote: info, path: stagingPath)
            } else {
                context.progress.begin(id, direction: .download, totalBytes: record.size)
                let data = try await context.remote.downloadFile(attachment: attachment)
                (size, sha256) = (Int64(data.count), FileStreaming.sha256(data))
                try verify(size: size, sha256: sha256, of: record, remote: RemoteObjectInfo(), path: stagingPath)
                _ = try await context.local.saveFile(filePath: stagingPath, data: data)
            }
            try Task.checkCancellation()
            // From the move on, a cancellation (stopSync, close, the record archived) must not cut the commit
            // or the clean-up short: the file would be in place with no record claiming it, and once the
            // record is gone no startup could tell whose it is. The rest runs to its end in a task of its own.
            return try await Task {
                try await commitDownload(
                    record, size: size, sha256: sha256, stagingPath: stagingPath, finalPath: finalPath,
                    localName: localName, context)
            }.value
        } catch {
            let code = (error as? AttachmentError)?.code
            let resumable =
                context.remote.supportsRangedDownloads && code != .integrityMismatch && code != .remoteNotFound
            if !resumable {
                try? await context.local.deleteFile(filePath: stagingPath)
                try? await context.local.deleteFile(
                    filePath: context.directory.appendingPathComponent(
                        FileName.resumeValidatorName(for: FileName.downloadingName(for: localName))
                    ).path)
            }
            throw error
        }
    }

    /// Moves a verified download into place and commits it; when the record no longer wants it (archived,
    /// deleted, or now known to have other content), removes the file again. Runs without cancellation.
    private nonisolated static func commitDownload(
        _ record: AttachmentRecord, size: Int64, sha256: String, stagingPath: String, finalPath: String,
        localName: String, _ context: TransferContext
    ) async throws -> TransferOutcome {
        try await context.local.moveFile(sourcePath: stagingPath, targetPath: finalPath)
        let store = context.store
        let timestamp = context.timestamps.next()
        let now = clampedMilliseconds(context.currentDate())
        let contentColumns: [(column: String, value: (any SqlValueConvertible)?)] = [
            ("has_synced", true), ("size", size), ("local_uri", localName), ("content_hash", sha256),
            ("last_used_at", now),
        ]
        // A queued download commits only while still queued (archived or deleted meanwhile: superseded);
        // one asked for on a record without content also lands on a synced or archived record that is
        // still without content, which keeps its state.
        let accepted: Set<AttachmentState> =
            record.state == .queuedDownload ? [.queuedDownload] : [.queuedDownload, .synced, .archived]
        // The record may have learned a hash or size while the bytes came (a row carrying them): they
        // must match it too.
        let known = try await context.db.writeTransaction { tx -> (committed: Bool, current: AttachmentRecord?) in
            guard let current = try store.record(id: record.id, in: tx), accepted.contains(current.state),
                current.state == .queuedDownload || current.localPath == nil,
                current.contentHash.map({ $0.lowercased() == sha256 }) ?? true,
                current.size.map({ $0 == size }) ?? true
            else { return (false, try store.record(id: record.id, in: tx)) }
            if current.state == .queuedDownload {
                return (
                    try store.transition(
                        id: record.id, from: .queuedDownload, to: .synced, timestamp: timestamp,
                        set: contentColumns + retryStateCleared, in: tx), current
                )
            }
            return (try store.update(id: record.id, ifState: current.state, set: contentColumns, in: tx), current)
        }
        if !known.committed, let current = known.current, current.localPath == nil,
            current.contentHash.map({ $0.lowercased() != sha256 }) ?? false
                || current.size.map({ $0 != size }) ?? false
        {
            try await context.local.deleteFile(filePath: finalPath)
            throw AttachmentError(
                code: .integrityMismatch,
                message: "downloaded content of attachment \(String(reflecting: record.id)) does not match the "
                    + "hash or size it is now known to have; the file was discarded",
                attachmentId: record.id, path: finalPath)
        }
        let committed = known.committed
        if !committed {
            // Archived or deleted meanwhile: unless the record took the file after all, remove it.
            let current = try await context.db.readTransaction { tx in try store.record(id: record.id, in: tx) }
            if current?.localPath != localName {
                try await context.local.deleteFile(filePath: finalPath)
            }
            return .superseded
        }
        context.logger.debug("downloaded", metadata: ["attachment": "\(record.id)", "bytes": "\(size)"])
        return .completed(bytes: size)
    }

    /// Throws ``AttachmentError/Code-swift.struct/integrityMismatch`` unless the downloaded file (`size`
    /// bytes with SHA-256 `sha256`) is the attachment's content: its hash must be the one the record knows
    /// (saved here, or carried by the watched item), else the one remote storage keeps with the object; its
    /// size the record's, else the remote's. With neither known, nothing can be checked.
    static func verify(
        size: Int64, sha256: String, of record: AttachmentRecord, remote: RemoteObjectInfo, path: String
    ) throws {
        func mismatch(_ what: String) -> AttachmentError {
            AttachmentError(
                code: .integrityMismatch,
                message: "downloaded content of attachment \(String(reflecting: record.id)) \(what); the file was "
                    + "discarded", attachmentId: record.id, path: path)
        }
        let recorded = record.contentHash?.lowercased()
        let stored = remote.sha256.map { $0.lowercased() }.flatMap { FileStreaming.isSHA256($0) ? $0 : nil }
        if let recorded, let stored, recorded != stored {
            throw mismatch("comes from an object whose stored SHA-256 is \(stored), expected \(recorded)")
        }
        if let expected = recorded ?? stored, expected != sha256 {
            throw mismatch("has SHA-256 \(sha256), expected \(expected)")
        }
        if let expected = record.size ?? remote.size, expected != size {
            throw mismatch("is \(size) bytes long, expected \(expected)")
        }
    }

    private nonisolated static func delete(
        _ record: AttachmentRecord, _ attachment: Attachment, _ context: TransferContext
    ) async throws -> TransferOutcome {
        // An upload interrupted before the delete will never resume: let the remote forget it.
        if !record.hasSynced { try await context.remote.discardPartialUpload(attachment: attachment) }
        try await context.remote.deleteFile(attachment: attachment)
        if let path = attachment.localUri {
            try await context.local.deleteFile(filePath: path)
        }
        let store = context.store
        let deleted = try await context.db.writeTransaction { tx in
            try store.delete(id: record.id, ifState: .queuedDelete, in: tx)
        }
        context.logger.debug("deleted", metadata: ["attachment": "\(record.id)"])
        return deleted ? .completed(bytes: 0) : .superseded
    }

    /// Counts the failure, then retries after the backoff delay (or the server's `Retry-After`, when
    /// longer, but never beyond the backoff's ``RetryBackoff/maximumDelay``) or gives up: the error handler
    /// decides first (given the attempt count), then `maxAttempts`.
    private nonisolated static func handleFailure(
        _ record: AttachmentRecord, _ attachment: Attachment, _ error: any Error, _ context: TransferContext
    ) async -> TransferOutcome {
        let attempt = record.attempts + 1
        var handlerRetries = true
        if let handler = context.errorHandler {
            handlerRetries = await handler.shouldRetry(attachment: attachment, error: error, attempt: attempt)
        }
        var generator = SystemRandomNumberGenerator()
        let decision = context.failurePolicy.decide(
            attempt: attempt, handlerRetries: handlerRetries, retryAfter: (error as? AttachmentError)?.retryAfter,
            now: clampedMilliseconds(context.currentDate()), using: &generator)
        do {
            let next: Int64
            switch decision {
            case .retry(let at):
                next = at
            case .giveUpAfterMaxAttempts:
                context.logger.error(
                    "giving up after \(attempt) failed attempts",
                    metadata: ["attachment": "\(record.id)", "error": "\(error)"])
                return try await giveUp(record, because: error, attempts: attempt, context)
            case .giveUpByHandler:
                return try await giveUp(record, because: error, attempts: attempt, context)
            }
            let store = context.store
            let message = String(describing: error).prefix(1000)
            _ = try await context.db.writeTransaction { tx in
                // The timestamp stays: a failure is no state change, and must not wake the sync trigger.
                try store.update(
                    id: record.id, ifState: record.state,
                    set: [("attempts", attempt), ("next_attempt_at", next), ("last_error", String(message))], in: tx)
            }
            return .willRetry(error, attempt: attempt, retryAt: next)
        } catch {
            return .willRetry(error, attempt: attempt, retryAt: nil)
        }
    }

    /// Gives a transfer up: the record is archived and marked (``AttachmentRecord/givenUp``), with its attempt
    /// count and error. A given-up upload keeps its local file, the only copy: archived content that never
    /// reached remote storage is never evicted or purged, and is uploaded again by
    /// ``AttachmentQueue/retry(attachmentId:)`` or when a row refers to it anew.
    private nonisolated static func giveUp(
        _ record: AttachmentRecord, because error: any Error, clearingLocalPath: Bool = false, attempts: Int = 1,
        _ context: TransferContext
    ) async throws -> TransferOutcome {
        let store = context.store
        let timestamp = context.timestamps.next()
        // A given-up delete's local file was removed by deleteFile (or is being): the record lets go of it,
        // whether or not deleteFile got to say so first (a file still there is removed at startup).
        let releasing = clearingLocalPath || record.state == .queuedDelete
        let archived = try await context.db.writeTransaction { tx in
            try store.transition(
                id: record.id, from: record.state, to: .archived, timestamp: timestamp,
                set: (releasing ? [("local_uri", nil)] : []) + [
                    ("attempts", attempts), ("next_attempt_at", nil),
                    ("last_error", String(String(describing: error).prefix(1000))),
                    ("given_up", record.state.rawValue),
                ],
                in: tx)
        }
        if archived, record.state == .queuedUpload {
            try? await context.remote.discardPartialUpload(attachment: record.attachment(in: context.directory))
        }
        return archived ? .archived(error, attempts: attempts) : .superseded
    }
}
