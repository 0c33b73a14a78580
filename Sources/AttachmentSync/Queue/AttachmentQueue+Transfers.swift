import Foundation
import Logging

extension AttachmentQueue {
    /// What became of one transfer.
    enum TransferOutcome: Sendable {
        /// Done and committed.
        case completed
        /// Done, but the record had changed meanwhile (deleted, archived, re-queued): nothing committed.
        case superseded
        /// Interrupted by `stopSync`, `close` or a newer decision; not an error.
        case cancelled
        /// Failed; the error handler (or the default) chose to retry at the next trigger.
        case willRetry(any Error)
        /// Failed and archived (by the error handler, or because the local file to upload is gone).
        case archived(any Error)
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
    }

    /// Starts the transfer the record's state calls for. The caller has checked that none is in flight for
    /// this attachment.
    func startTransfer(_ record: AttachmentRecord) {
        let context = TransferContext(
            db: db, store: store, remote: remoteStorage, local: localStorage, errorHandler: errorHandler,
            directory: attachmentsDirectory, timestamps: timestamps, logger: logger
        )
        let task = Task {
            let outcome = await Self.perform(record, context: context)
            await self.transferFinished(record, outcome: outcome)
        }
        transfers[record.id] = Transfer(state: record.state, task: task)
    }

    /// Books a finished transfer and keeps the queue moving: the next queued attachments start at once
    /// (while syncing or during `syncNow`), and idle waiters are released when nothing is left in flight.
    func transferFinished(_ record: AttachmentRecord, outcome: TransferOutcome) async {
        transfers[record.id] = nil
        finishedTransferCount += 1
        if queuedReadsInFlight > 0 { finishedWhileReading[record.id] = finishedTransferCount }
        switch outcome {
        case .completed, .superseded:
            break
        case .cancelled:
            skippedUntilTrigger[record.id] = record.state
        case .willRetry(let error):
            skippedUntilTrigger[record.id] = record.state
            logError("\(record.state) failed; it will be retried", error, id: record.id)
        case .archived(let error):
            logError("\(record.state) failed; the attachment was archived", error, id: record.id)
        }
        if !isClosed, session != nil || manualRounds > 0 {
            do {
                try await startQueuedTransfers()
            } catch {
                logError("reading the queued attachments failed", error)
            }
        }
        if transfers.isEmpty { resumeIdleWaiters() }
    }

    /// Runs one transfer and commits its result, off the actor.
    nonisolated static func perform(_ record: AttachmentRecord, context: TransferContext) async -> TransferOutcome {
        let attachment = record.attachment(in: context.directory)
        do {
            try Task.checkCancellation()
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

    private nonisolated static func upload(
        _ record: AttachmentRecord, _ attachment: Attachment, _ context: TransferContext
    ) async throws -> TransferOutcome {
        guard let path = attachment.localUri, try await context.local.fileExists(filePath: path) else {
            // The only copy is gone: there is nothing to upload, ever.
            let error = AttachmentError(
                code: .localFileNotFound,
                message: "the file to upload is missing", attachmentId: record.id, path: attachment.localUri)
            return try await archive(record, because: error, clearingLocalPath: true, context)
        }
        let data = try await context.local.readFile(filePath: path, mediaType: record.mediaType)
        try await context.remote.uploadFile(data: data, attachment: attachment)
        let store = context.store
        let timestamp = context.timestamps.next()
        let committed = try await context.db.writeTransaction { tx in
            try store.transition(
                id: record.id, from: .queuedUpload, to: .synced, timestamp: timestamp,
                set: [("has_synced", true), ("size", Int64(data.count))], in: tx)
        }
        context.logger.debug("uploaded", metadata: ["attachment": "\(record.id)", "bytes": "\(data.count)"])
        return committed ? .completed : .superseded
    }

    private nonisolated static func download(
        _ record: AttachmentRecord, _ attachment: Attachment, _ context: TransferContext
    ) async throws -> TransferOutcome {
        let ext = try FileName.normalizedExtension(
            FileName.localExtension(fileExtension: nil, filename: record.filename), attachmentId: record.id)
        let localName = try FileName.localName(id: record.id, fileExtension: ext)
        let finalPath = context.directory.appendingPathComponent(localName).path
        let stagingPath = context.directory.appendingPathComponent(FileName.downloadingName(for: localName)).path

        let data = try await context.remote.downloadFile(attachment: attachment)
        try Task.checkCancellation()
        do {
            let size = try await context.local.saveFile(filePath: stagingPath, data: data)
            try Task.checkCancellation()
            try await context.local.moveFile(sourcePath: stagingPath, targetPath: finalPath)
            let store = context.store
            let timestamp = context.timestamps.next()
            let committed = try await context.db.writeTransaction { tx in
                try store.transition(
                    id: record.id, from: .queuedDownload, to: .synced, timestamp: timestamp,
                    set: [("has_synced", true), ("size", size), ("local_uri", localName)], in: tx)
            }
            if !committed {
                // Archived or deleted meanwhile: unless the record took the file after all, remove it.
                let current = try await context.db.readTransaction { tx in try store.record(id: record.id, in: tx) }
                if current?.localPath != localName {
                    try await context.local.deleteFile(filePath: finalPath)
                }
                return .superseded
            }
            context.logger.debug("downloaded", metadata: ["attachment": "\(record.id)", "bytes": "\(size)"])
            return .completed
        } catch {
            try? await context.local.deleteFile(filePath: stagingPath)
            throw error
        }
    }

    private nonisolated static func delete(
        _ record: AttachmentRecord, _ attachment: Attachment, _ context: TransferContext
    ) async throws -> TransferOutcome {
        try await context.remote.deleteFile(attachment: attachment)
        if let path = attachment.localUri {
            try await context.local.deleteFile(filePath: path)
        }
        let store = context.store
        let deleted = try await context.db.writeTransaction { tx in
            try store.delete(id: record.id, ifState: .queuedDelete, in: tx)
        }
        context.logger.debug("deleted", metadata: ["attachment": "\(record.id)"])
        return deleted ? .completed : .superseded
    }

    /// Asks the error handler (when there is one) whether to retry or archive.
    private nonisolated static func handleFailure(
        _ record: AttachmentRecord, _ attachment: Attachment, _ error: any Error, _ context: TransferContext
    ) async -> TransferOutcome {
        var retry = true
        if let handler = context.errorHandler {
            switch record.state {
            case .queuedUpload: retry = await handler.onUploadError(attachment: attachment, error: error)
            case .queuedDownload: retry = await handler.onDownloadError(attachment: attachment, error: error)
            case .queuedDelete: retry = await handler.onDeleteError(attachment: attachment, error: error)
            case .synced, .archived: retry = true
            }
        }
        guard !retry else { return .willRetry(error) }
        do {
            return try await archive(record, because: error, context)
        } catch {
            return .willRetry(error)
        }
    }

    private nonisolated static func archive(
        _ record: AttachmentRecord, because error: any Error, clearingLocalPath: Bool = false,
        _ context: TransferContext
    ) async throws -> TransferOutcome {
        let store = context.store
        let timestamp = context.timestamps.next()
        let archived = try await context.db.writeTransaction { tx in
            try store.transition(
                id: record.id, from: record.state, to: .archived, timestamp: timestamp,
                set: clearingLocalPath ? [("local_uri", nil)] : [], in: tx)
        }
        return archived ? .archived(error) : .superseded
    }
}
