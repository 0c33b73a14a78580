import Foundation

/// What ``AttachmentQueue/repairLocalFiles()`` found and did.
public struct LocalFileRepair: Sendable {
    /// Everything that disagreed when the files were checked (see ``LocalFileVerification``).
    public var verification: LocalFileVerification
    /// The attachments whose damaged or missing local content was let go: queued to download again
    /// (``AttachmentState/queuedDownload``), or left remote-only when they are archived or on demand.
    public var refetched: [String]
    /// Findings left as they are: content that never reached remote storage (the file is the only copy,
    /// damaged or not, and is never removed), files no record claims (the next startup removes those the
    /// queue made), and attachments that changed or were being transferred meanwhile.
    public var leftAlone: [LocalFileVerification.Finding]
}

/// What ``AttachmentQueue/repairRemoteFiles()`` found and did.
public struct RemoteFileRepair: Sendable {
    /// Every record whose remote file disagreed when the remote was checked (see ``RemoteVerification``).
    public var verification: RemoteVerification
    /// The attachments queued to upload again from their intact local files
    /// (``AttachmentState/queuedUpload``, no longer counted as uploaded).
    public var reuploading: [String]
    /// Findings left as they are: remote files stored with another SHA-256 (another upload under the same
    /// name: a conflict, not damage, so never replaced), no intact local copy on this device (another device
    /// may still have one), attachments no longer synced, and attachments that changed or were being
    /// transferred meanwhile.
    public var leftAlone: [RemoteVerification.Finding]
}

extension AttachmentQueue {
    /// Checks every attachment's local file against its record (see
    /// ``LocalFileVerification/verify(db:attachmentsDirectory:table:subdirectories:progress:)``) and lets go of
    /// damaged or missing content that remote storage holds, so it is fetched again and verified.
    ///
    /// A synced attachment downloaded eagerly goes back to ``AttachmentState/queuedDownload`` (the pass this
    /// call triggers downloads it, checked against the record's SHA-256); an on-demand or archived one keeps
    /// its state without content. The damaged file is removed only after its record let go of it. Content
    /// that never reached remote storage is never touched: a damaged only copy is reported, not deleted.
    /// Safe while syncing: each change is conditional on the record still claiming that file, and
    /// attachments being saved or transferred are skipped.
    ///
    /// ```swift
    /// let repair = try await queue.repairLocalFiles()
    /// for finding in repair.leftAlone where !finding.remoteHasContent { warnUser(finding) }
    /// ```
    ///
    /// - Throws: Database and file system errors; ``AttachmentError/Code-swift.struct/closed`` after
    ///   ``close()``.
    @discardableResult
    public func repairLocalFiles() async throws -> LocalFileRepair {
        try await operation {
            let verification = try await LocalFileVerification.verify(
                db: db, attachmentsDirectory: attachmentsDirectory.path,
                table: configuration.attachmentsQueueTableName, subdirectories: configuration.subdirectories)
            var refetched: [String] = []
            var leftAlone: [LocalFileVerification.Finding] = []
            for finding in verification.findings {
                guard let id = finding.attachmentId, finding.remoteHasContent, finding.problem != .unclaimed,
                    machine.mayStartOnRequest(id), try await letGo(of: finding.file, id: id)
                else {
                    leftAlone.append(finding)
                    continue
                }
                refetched.append(id)
                logger.warning(
                    "a local file disagreed with its record; it will be fetched again",
                    metadata: ["attachment": "\(id)", "problem": "\(finding.problem)"])
            }
            if !refetched.isEmpty { trigger() }
            return LocalFileRepair(verification: verification, refetched: refetched, leftAlone: leftAlone)
        }
    }

    /// Checks every uploaded attachment's remote file against its record (see
    /// ``RemoteVerification/verify(db:remote:table:progress:)``) and uploads again, from the local file, what
    /// the remote lost or holds wrong bytes for.
    ///
    /// Only a synced attachment whose remote file is missing or damaged (stored with the record's SHA-256
    /// but of another size; a file stored with another SHA-256, or none, may be another upload under the same
    /// name and is never replaced) and whose local file is intact (its size and SHA-256 are the record's) is
    /// queued again, a damaged remote file deleted first: it goes back to ``AttachmentState/queuedUpload`` and counts as not uploaded (so the cache never
    /// evicts it) until the upload this call triggers succeeds. Everything else is reported, never changed.
    /// Safe while syncing: each change is conditional on the record being as it was checked, and attachments
    /// being transferred are skipped.
    ///
    /// ```swift
    /// let repair = try await queue.repairRemoteFiles()
    /// for finding in repair.leftAlone where !finding.hasLocalFile { reportLost(finding.attachmentId) }
    /// ```
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/unsupported`` when the
    ///   remote storage adapter is not a ``ListableRemoteStorage``; what the remote throws; database and file
    ///   system errors; ``AttachmentError/Code-swift.struct/closed`` after ``close()``.
    @discardableResult
    public func repairRemoteFiles() async throws -> RemoteFileRepair {
        guard let remote = remoteStorage as? any ListableRemoteStorage else {
            throw AttachmentError(
                code: .unsupported,
                message: "\(type(of: remoteStorage)) cannot describe its files (it is not a ListableRemoteStorage), "
                    + "so the remote cannot be checked")
        }
        return try await operation {
            let verification = try await RemoteVerification.verify(
                db: db, remote: remote, table: configuration.attachmentsQueueTableName)
            var reuploading: [String] = []
            var leftAlone: [RemoteVerification.Finding] = []
            for finding in verification.findings {
                // Missing, or damaged: stored with this record's hash. Anything else may be another upload.
                let damaged =
                    finding.problem != .missing && finding.remoteSHA256 != nil
                    && finding.remoteSHA256 == finding.recordSHA256
                guard finding.problem == .missing || damaged, finding.state == .synced, finding.hasLocalFile,
                    machine.mayStartOnRequest(finding.attachmentId),
                    try await requeueUpload(id: finding.attachmentId, deletingRemote: damaged)
                else {
                    leftAlone.append(finding)
                    continue
                }
                reuploading.append(finding.attachmentId)
                logger.warning(
                    "remote storage lost or changed an attachment's file; it will be uploaded again",
                    metadata: ["attachment": "\(finding.attachmentId)", "problem": "\(finding.problem)"])
            }
            if !reuploading.isEmpty { trigger() }
            return RemoteFileRepair(verification: verification, reuploading: reuploading, leftAlone: leftAlone)
        }
    }

    /// Queues the synced attachment `id` to upload again when its local file is intact; `false` when it is
    /// not (or the record changed meanwhile).
    private func requeueUpload(id: String, deletingRemote: Bool) async throws -> Bool {
        let store = store
        guard let record = try await db.readTransaction({ tx in try store.record(id: id, in: tx) }),
            record.state == .synced, let relative = record.localPath
        else { return false }
        let path = localPath(relative)
        guard files.infoFollowingLinks(atPath: path)?.kind == .regular else { return false }
        let digest = try await files.digest(ofFileAt: path)
        if let size = record.size, size != digest.size { return false }
        if let hash = record.contentHash?.lowercased(), hash != digest.sha256 { return false }
        // Uploads never replace a file, so a damaged one goes first (the local copy is intact: checked above).
        if deletingRemote {
            try await remoteStorage.deleteFile(attachment: record.attachment(in: attachmentsDirectory))
        }
        let timestamp = timestamps.next()
        let requeued = try await db.writeTransaction { tx -> Bool in
            guard let current = try store.record(id: id, in: tx), current.localPath == relative else { return false }
            return try store.transition(
                id: id, from: .synced, to: .queuedUpload, timestamp: timestamp,
                set: AttachmentQueue.retryStateCleared + [("has_synced", false), ("given_up", nil)], in: tx)
        }
        if requeued { machine.noteChanged(id) }
        return requeued
    }

    /// The record of `id` lets go of its file `relative` (if it still claims it and its content was uploaded
    /// or downloaded), queued to download again when it is a synced, eagerly downloaded attachment; then the
    /// file is removed. `false` when the record changed meanwhile.
    private func letGo(of relative: String, id: String) async throws -> Bool {
        let store = store
        let timestamp = timestamps.next()
        let released = try await db.writeTransaction { tx -> Bool in
            guard let record = try store.record(id: id, in: tx), record.localPath == relative, record.hasSynced
            else { return false }
            if record.state == .synced, !record.onDemand {
                return try store.transition(
                    id: id, from: .synced, to: .queuedDownload, timestamp: timestamp,
                    set: AttachmentQueue.retryStateCleared + [("local_uri", nil)], in: tx)
            }
            guard record.state == .synced || record.state == .archived else { return false }
            return try store.releaseUploadedContent(id: id, ifState: record.state, localPath: relative, in: tx)
        }
        guard released else { return false }
        machine.noteChanged(id)
        try await localStorage.deleteFile(filePath: localPath(relative))
        return true
    }
}
