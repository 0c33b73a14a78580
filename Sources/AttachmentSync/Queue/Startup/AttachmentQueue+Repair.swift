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
