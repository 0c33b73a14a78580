import Foundation
import Logging

/// Runs one transfer (upload, download or remote delete) and commits its result, off the queue's actor:
/// everything it needs is in its properties, made by the queue for each transfer.
struct TransferWorker: Sendable {

    let db: LocalDatabase
    let store: AttachmentStore
    let remote: any RemoteStorageAdapter
    let local: any LocalStorageAdapter
    let errorHandler: (any SyncErrorHandler)?
    let directory: URL
    /// `directory`'s path.
    let directoryPath: String
    let timestamps: MonotonicTimestamps
    let logger: Logger
    let wallClock: WallClock
    let progress: ProgressCenter
    let files: any FileOperations
    let throttles: Throttles
    /// The network's conditions now: a failure while it is unreachable is no attempt.
    let network: LockedValue<NetworkConditions>
    /// Commits verified downloads, in groups when several finish together.
    let committer: DownloadCommitter
    /// Commits finished uploads, in groups when several finish together.
    let uploadCommitter: UploadCommitter
    /// The Data Protection class and backup setting downloaded files get.
    let localFiles: LocalFilePolicy
    /// Where transfers that suit it are handed to a background service, `nil` when none are.
    var handOff: HandOffContext? = nil

    /// The bandwidth caps of a queue's uploads and downloads: made ``BandwidthThrottle/current`` while the
    /// adapter moves a file in that direction.
    struct Throttles: Sendable {
        var upload: BandwidthThrottle?
        var download: BandwidthThrottle?

        init(limit: BandwidthLimit?, clock: any Clock<Duration>) {
            upload = limit?.uploadBytesPerSecond.map { BandwidthThrottle(bytesPerSecond: $0, clock: clock) }
            download = limit?.downloadBytesPerSecond.map { BandwidthThrottle(bytesPerSecond: $0, clock: clock) }
        }
    }

    /// Runs one transfer and commits its result, off the actor. `onDemand` runs a download whatever the
    /// record's state (a remote-only `synced` or `archived` record, say). With `mayHandOff` (and a
    /// ``handOff`` context), a transfer that suits it goes to the background service instead.
    func perform(
        _ record: AttachmentRecord, onDemand: Bool = false, mayHandOff: Bool = false
    ) async -> TransferReport {
        let attachment = record.attachment(inPath: directoryPath)
        do {
            try Task.checkCancellation()
            if !onDemand, mayHandOff, let handOff,
                let report = try await handOffIfSuited(record, attachment, handOff)
            {
                return report
            }
            if onDemand {
                do {
                    return try await download(record, attachment)
                } catch {
                    if Task.isCancelled || error is CancellationError { return .cancelled }
                    return .failedOnRequest(error)
                }
            }
            switch record.state {
            case .queuedUpload: return try await upload(record, attachment)
            case .queuedDownload: return try await download(record, attachment)
            case .queuedDelete: return try await delete(record, attachment)
            case .synced, .archived: return .superseded
            }
        } catch {
            if Task.isCancelled || error is CancellationError { return .cancelled }
            return .failed(await classify(record, attachment, error))
        }
    }

    private func upload(
        _ record: AttachmentRecord, _ attachment: Attachment
    ) async throws -> TransferReport {
        guard let path = attachment.localUri, try await local.fileExists(filePath: path) else {
            // Only a file the file system says is not there ("no such file") is gone. One it cannot look at
            // (throws) or sees where the adapter does not may be intact: that is no reason to let go of it.
            if let path = attachment.localUri, try files.info(atPath: path) != nil {
                throw AttachmentError(
                    code: .fileSystem,
                    message: "the local storage adapter does not see the file to upload, which is there",
                    attachmentId: record.id, path: path)
            }
            // The only copy is gone: there is nothing to upload, ever.
            let error = AttachmentError(
                code: .localFileNotFound,
                message: "the file to upload is missing", attachmentId: record.id, path: attachment.localUri)
            return .failed(TransferFailure(error: error, kind: .localFileGone))
        }
        let id = record.id
        let size: Int64
        if let url = local.plainFileURL(filePath: path) {
            size = try await local.fileSize(filePath: path) ?? record.size ?? 0
            if record.contentHash != nil || record.size != nil {
                let digest = try await files.digest(ofFileAt: url.path)
                if let damaged = changedSinceSave(record, size: digest.size, sha256: digest.sha256, path: path) {
                    return .failed(TransferFailure(error: damaged, kind: .changedSinceSave))
                }
            }
            progress.begin(id, direction: .upload, totalBytes: size)
            // The file is one of the queue's, never changed in place: the default `uploadFile(fileURL:…)` may
            // map it rather than read it into memory (see MappedFile).
            try await MappedFile.$immutableFile.withValue(url.path) {
                try await BandwidthThrottle.$current.withValue(throttles.upload) {
                    try await remote.uploadFile(fileURL: url, attachment: attachment) {
                        progress.report(id, $0)
                    }
                }
            }
        } else {
            let data = try await local.readFile(filePath: path, mediaType: record.mediaType)
            size = Int64(data.count)
            if let damaged = changedSinceSave(record, size: size, sha256: FileStreaming.sha256(data), path: path) {
                return .failed(TransferFailure(error: damaged, kind: .changedSinceSave))
            }
            progress.begin(id, direction: .upload, totalBytes: size)
            try await BandwidthThrottle.$current.withValue(throttles.upload) {
                try await remote.uploadFile(data: data, attachment: attachment)
            }
        }
        let committed = try await uploadCommitter.commit(
            UploadCommitter.Entry(id: record.id, size: size))
        logger.debug("uploaded", metadata: ["attachment": "\(record.id)", "bytes": "\(size)"])
        return committed ? .completed(bytes: size) : .superseded
    }

    /// The error to give an upload up with when its local file is no longer what was saved (its size or
    /// SHA-256 differs from the record's): retrying cannot help, and uploading it would put wrong bytes in
    /// remote storage under the record's hash. The file stays, as the only copy there is.
    private func changedSinceSave(_ record: AttachmentRecord, size: Int64, sha256: String, path: String)
        -> AttachmentError?
    {
        let what: String
        if let expected = record.size, expected != size {
            what = "is \(size) bytes long, not the \(expected) it was saved with"
        } else if let expected = record.contentHash?.lowercased(), expected != sha256 {
            what = "has SHA-256 \(sha256), not the \(expected) it was saved with"
        } else {
            return nil
        }
        return AttachmentError(
            code: .integrityMismatch,
            message: "the local file of attachment \(String(reflecting: record.id)) \(what); it was not uploaded "
                + "and is kept as it is", attachmentId: record.id, path: path)
    }

    /// Downloads to a partial file under a temporary name, verifies it, moves it into place and commits.
    ///
    /// The partial file survives cancellation and failures other than a mismatch or a missing remote
    /// file: when the remote supports ranged reads, the next try continues from its end. Attachments are
    /// immutable (a new file gets a new id), so the bytes already there are the start of the same content;
    /// the adapter starts over when it sees the object changed, and the whole file is checked anyway.
    private func download(
        _ record: AttachmentRecord, _ attachment: Attachment
    ) async throws -> TransferReport {
        let localName = try record.localName()
        let finalPath = FileName.join(directoryPath, localName)
        let stagingPath = FileName.join(directoryPath, FileName.downloadingName(for: localName))
        let id = record.id

        do {
            let (size, sha256): (Int64, String)
            let plain = local.plainFileURL(filePath: stagingPath)
            if let staging = plain {
                let partial = try await local.fileSize(filePath: stagingPath) ?? 0
                let info: RemoteObjectInfo
                if partial > 0, remote.supportsRangedDownloads {
                    progress.begin(id, direction: .download, completedBytes: partial, totalBytes: record.size)
                    logger.debug(
                        "resuming a download", metadata: ["attachment": "\(id)", "offset": "\(partial)"])
                    info = try await BandwidthThrottle.$current.withValue(throttles.download) {
                        try await remote.downloadFile(attachment: attachment, into: staging, from: partial) {
                            progress.report(id, $0)
                        }
                    }
                } else {
                    try await local.deleteFile(filePath: stagingPath)
                    progress.begin(id, direction: .download, totalBytes: record.size)
                    info = try await BandwidthThrottle.$current.withValue(throttles.download) {
                        try await remote.downloadFile(attachment: attachment, into: staging, from: 0) {
                            progress.report(id, $0)
                        }
                    }
                }
                (size, sha256) = try await writtenDigest(info, ofFileAt: stagingPath)
                try Self.verify(size: size, sha256: sha256, of: record, remote: info, path: stagingPath)
                // Set on the staged file, before the commit flushes it: the name it is renamed to keeps them.
                // The adapter may have moved the file in from elsewhere (a URLSession download's temporary
                // file), so what the folder would have given it is not enough.
                try files.setAttributes(localFiles.attributes(for: .download), atPath: stagingPath)
            } else {
                progress.begin(id, direction: .download, totalBytes: record.size)
                let data = try await BandwidthThrottle.$current.withValue(throttles.download) {
                    try await remote.downloadFile(attachment: attachment)
                }
                (size, sha256) = (Int64(data.count), FileStreaming.sha256(data))
                try Self.verify(size: size, sha256: sha256, of: record, remote: RemoteObjectInfo(), path: stagingPath)
                _ = try await local.saveFile(filePath: stagingPath, data: data)
            }
            try Task.checkCancellation()
            // From the move on, a cancellation (stopSync, close, the record archived) must not cut the commit
            // or the clean-up short: the file would be in place with no record claiming it, and once the
            // record is gone no startup could tell whose it is. The committer runs it in a task of its own.
            return try await committer.commit(
                DownloadCommitter.Entry(
                    record: record, size: size, sha256: sha256, stagingPath: stagingPath, finalPath: finalPath,
                    localName: localName, needsFlush: plain != nil),
                with: self)
        } catch {
            let code = (error as? AttachmentError)?.code
            let resumable =
                remote.supportsRangedDownloads && code != .integrityMismatch && code != .remoteNotFound
            if !resumable {
                try? await local.deleteFile(filePath: stagingPath)
                try? await local.deleteFile(
                    filePath: directory.appendingPathComponent(
                        FileName.resumeValidatorName(for: FileName.downloadingName(for: localName))
                    ).path)
            }
            throw error
        }
    }

    /// The size and SHA-256 of the downloaded file: the digest the adapter computed while writing it, when it
    /// gave one for exactly as many bytes as the file holds; otherwise read from the file.
    private func writtenDigest(_ info: RemoteObjectInfo, ofFileAt path: String) async throws -> (Int64, String) {
        if let written = info.writtenSHA256?.lowercased(), FileStreaming.isSHA256(written),
            let size = info.writtenSize, try files.info(atPath: path)?.size == size
        {
            return (size, written)
        }
        return try await files.digest(ofFileAt: path)
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

    private func delete(
        _ record: AttachmentRecord, _ attachment: Attachment
    ) async throws -> TransferReport {
        // An upload interrupted before the delete will never resume: let the remote forget it.
        if !record.hasSynced { try await remote.discardPartialUpload(attachment: attachment) }
        try await remote.deleteFile(attachment: attachment)
        if let path = attachment.localUri {
            try await local.deleteFile(filePath: path)
        }
        let store = store
        let deleted = try await db.writeTransaction { tx in
            try store.markDeleted(id: record.id, in: tx)
        }
        logger.debug("deleted", metadata: ["attachment": "\(record.id)"])
        return deleted ? .completed(bytes: 0) : .superseded
    }
}
