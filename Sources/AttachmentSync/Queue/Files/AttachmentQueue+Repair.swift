import Foundation

/// What ``AttachmentQueue/repairLocalFiles()`` found and did.
public struct LocalFileRepair: Sendable {
    /// Everything that disagreed when the files were checked (see ``LocalFileVerification``).
    public var verification: LocalFileVerification
    /// The attachments whose damaged or missing local content was let go: queued to download again
    /// (``AttachmentState/queuedDownload``), or left remote-only when they are archived or on demand.
    public var refetched: [String]
    /// Damaged files set aside instead of deleted, by attachment id: where each is now (in the
    /// `attachment-sync-damaged` folder of the attachments directory, which the queue never cleans up).
    /// A damaged file is deleted only once remote storage has confirmed it holds the content intact; a remote
    /// that cannot describe its files (not a ``ListableRemoteStorage``, or one that keeps no SHA-256) cannot,
    /// so the file is kept there, as the only copy it may be. Delete them once the fetched copies are checked.
    public var movedAside: [String: String] = [:]
    /// Findings left as they are: content that never reached remote storage (the file is the only copy,
    /// damaged or not, and is never removed), damaged content remote storage does not hold intact (or could
    /// not be asked about: nothing is changed while it cannot be reached), files that cannot be read, files
    /// no record claims (the next startup removes those the queue made), and attachments that changed or were
    /// being transferred meanwhile. ``reasons`` says why, by file.
    public var leftAlone: [LocalFileVerification.Finding]
    /// Why each finding of ``leftAlone`` was left alone, by its ``LocalFileVerification/Finding/file``, when
    /// the remote had a say (it lacks the content, or could not be asked).
    public var reasons: [String: String] = [:]
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
    /// its state without content. Content that never reached remote storage is never touched: a damaged only
    /// copy is reported, not deleted.
    ///
    /// A damaged file (of the wrong size or SHA-256; it may still be mostly right) is deleted only after
    /// remote storage confirmed, asked now, that it holds the content intact: a file of the record's size
    /// stored with the record's SHA-256 (``ListableRemoteStorage/fileInfo(attachment:)``). Where the remote
    /// cannot be asked (it is not a ``ListableRemoteStorage`` or keeps no SHA-256), the damaged file is moved
    /// aside (``LocalFileRepair/movedAside``) and fetched again; where it lacks the content or cannot be
    /// reached, nothing is changed (``LocalFileRepair/reasons``).
    /// Safe while syncing: each change is conditional on the record still claiming that file, and
    /// attachments being saved or transferred are skipped.
    ///
    /// ```swift
    /// let repair = try await queue.repairLocalFiles()
    /// for finding in repair.leftAlone where !finding.remoteHasContent { warnUser(finding) }
    /// ```
    ///
    /// - Throws: ``AttachmentError/Code-swift.struct/remoteNotFound``, with nothing changed, when the remote is a
    ///   ``ListableRemoteStorage`` whose location does not exist; what it throws when asked;
    ///   database and file system errors; ``AttachmentError/Code-swift.struct/closed`` after
    ///   ``close()``; ``AttachmentError/Code-swift.struct/directoryInUse`` when another process of the app
    ///   holds the transfer lease (nothing changed).
    @discardableResult
    public func repairLocalFiles() async throws -> LocalFileRepair {
        try await withLease {
            let verification = try await LocalFileVerification.verify(
                db: db, attachmentsDirectory: attachmentsDirectory.path,
                table: configuration.attachmentsQueueTableName, subdirectories: configuration.subdirectories)
            var repair = LocalFileRepair(verification: verification, refetched: [], leftAlone: [])
            // A mistyped remote must not turn local findings into downloads of files that are nowhere.
            if let remote = remoteStorage as? any ListableRemoteStorage,
                verification.findings.contains(where: { $0.remoteHasContent && $0.attachmentId != nil })
            {
                try await RemoteVerification.requireLocation(of: remote)
            }
            for finding in verification.findings {
                guard let id = finding.attachmentId, finding.remoteHasContent, machine.mayStartOnRequest(id) else {
                    repair.leftAlone.append(finding)
                    continue
                }
                let damaged: Bool
                switch finding.problem {
                case .missing: damaged = false
                case .wrongSize, .wrongHash: damaged = true
                case .unclaimed, .unreadable:
                    repair.leftAlone.append(finding)
                    continue
                }
                var disposal = Disposal.delete
                if damaged {
                    let store = store
                    guard let record = try await db.readTransaction({ tx in try store.record(id: id, in: tx) }) else {
                        repair.leftAlone.append(finding)
                        continue
                    }
                    switch await remoteCopyEvidence(for: record) {
                    case .intact:
                        disposal = .delete
                    case .cannotAsk:
                        disposal = .moveAside
                    case .notIntact(let why):
                        repair.leftAlone.append(finding)
                        repair.reasons[finding.file] = why + "; the local file is kept as it is"
                        continue
                    case .unreachable(let error):
                        repair.leftAlone.append(finding)
                        repair.reasons[finding.file] =
                            "remote storage could not be asked (\(error)); nothing was changed"
                        continue
                    }
                }
                let outcome = try await letGo(of: finding.file, id: id, disposal)
                guard outcome.letGo else {
                    repair.leftAlone.append(finding)
                    continue
                }
                repair.refetched.append(id)
                if let aside = outcome.movedTo { repair.movedAside[id] = aside }
                logger.warning(
                    "a local file disagreed with its record; it will be fetched again",
                    metadata: [
                        "attachment": "\(id)", "problem": "\(finding.problem)",
                        "set aside": "\(outcome.movedTo ?? "no")",
                    ])
            }
            if !repair.refetched.isEmpty { trigger() }
            return repair
        }
    }

    /// Checks every uploaded attachment's remote file against its record (see
    /// ``RemoteVerification/verify(db:remote:table:encrypted:stateFile:remoteName:progress:)``) and uploads again, from the local file, what
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
    ///   system errors; ``AttachmentError/Code-swift.struct/closed`` after ``close()``;
    ///   ``AttachmentError/Code-swift.struct/directoryInUse`` when another process of the app holds the
    ///   transfer lease (nothing changed).
    @discardableResult
    public func repairRemoteFiles() async throws -> RemoteFileRepair {
        guard let remote = remoteStorage as? any ListableRemoteStorage else {
            throw AttachmentError(
                code: .unsupported,
                message: "\(type(of: remoteStorage)) cannot describe its files (it is not a ListableRemoteStorage), "
                    + "so the remote cannot be checked")
        }
        return try await withLease {
            let verification = try await RemoteVerification.verify(
                db: db, remote: remote, table: configuration.attachmentsQueueTableName)
            try Self.refuseIfEncrypted(verification)
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

    /// Throws, before anything is changed, when the remote's files look end-to-end encrypted while this queue's
    /// remote does not encrypt (a tool opened the bare bucket, say): uploading a lost file again through it
    /// would put plain content where the app keeps only ciphertext. The evidence: a file whose size is not
    /// the record's but is exactly what an encrypted file of the record's content would be.
    static func refuseIfEncrypted(_ verification: RemoteVerification) throws {
        let encrypted = verification.findings.first {
            guard case .wrongSize(let contentSize, let actual) = $0.problem else { return false }
            return EncryptedFormat.isCiphertextSize(actual, contentSize: contentSize)
        }
        guard let encrypted else { return }
        throw AttachmentError(
            code: .invalidConfiguration,
            message: "remote storage holds end-to-end encrypted files (attachment "
                + "\(String(reflecting: encrypted.attachmentId)) is stored as \(encrypted.problem)), and this remote "
                + "does not encrypt: uploading through it would store plain content. Nothing was changed (check "
                + "encrypted files with RemoteVerification's encrypted: true, or verify --encrypted)",
            attachmentId: encrypted.attachmentId)
    }

    /// Queues the synced attachment `id` to upload again when its local file is intact; `false` when it is
    /// not (or the record changed meanwhile).
    private func requeueUpload(id: String, deletingRemote: Bool) async throws -> Bool {
        let store = store
        guard let record = try await db.readTransaction({ tx in try store.record(id: id, in: tx) }),
            record.state == .synced, let relative = record.localPath
        else { return false }
        let path = localPath(relative)
        guard try files.infoFollowingLinks(atPath: path)?.kind == .regular else { return false }
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
                set: .retryStateCleared + .set(.hasSynced, false) + .set(.givenUp, nil), in: tx)
        }
        if requeued { machine.noteChanged(id) }
        return requeued
    }

    /// What becomes of a damaged local file once its record lets go of it.
    enum Disposal {
        /// Deleted: remote storage holds the content intact.
        case delete
        /// Moved into the `attachment-sync-damaged` folder: nothing confirmed the remote holds it.
        case moveAside
    }

    /// The folder of the attachments directory where repairs keep damaged files they could not prove
    /// redundant. Startup leaves folders alone.
    static let damagedFolderName = "attachment-sync-damaged"

    /// The record of `id` lets go of its file `relative` (if it still claims it and its content was uploaded
    /// or downloaded), queued to download again when it is a synced, eagerly downloaded attachment; the file
    /// is removed, or moved aside (`disposal`). `letGo` is `false` when the record changed meanwhile (a file
    /// moved aside then goes back); `movedTo` says where the file was moved, if it was.
    private func letGo(of relative: String, id: String, _ disposal: Disposal) async throws -> (
        letGo: Bool, movedTo: String?
    ) {
        let store = store
        var aside: String?
        if disposal == .moveAside, try files.info(atPath: localPath(relative)) != nil {
            // Moved before the record lets go: a crash in between leaves a record that claims a missing file
            // (startup fetches it again), never a file nobody claims (startup would remove it).
            let folder = localPath(Self.damagedFolderName)
            try await localStorage.makeDir(path: folder)
            let name = (relative as NSString).lastPathComponent
            var target = FileName.join(folder, name)
            var number = 1
            while try files.info(atPath: target) != nil, number < 1000 {
                number += 1
                target = FileName.join(folder, "\(name).\(number)")
            }
            try await localStorage.moveFile(sourcePath: localPath(relative), targetPath: target)
            aside = target
        }
        let timestamp = timestamps.next()
        let released = try await db.writeTransaction { tx -> Bool in
            guard let record = try store.record(id: id, in: tx), record.localPath == relative, record.hasSynced
            else { return false }
            if record.state == .synced, !record.onDemand {
                return try store.transition(
                    id: id, from: .synced, to: .queuedDownload, timestamp: timestamp,
                    set: .retryStateCleared + .set(.localUri, nil), in: tx)
            }
            guard record.state == .synced || record.state == .archived else { return false }
            return try store.releaseUploadedContent(id: id, ifState: record.state, localPath: relative, in: tx)
        }
        guard released else {
            if let aside, try files.info(atPath: localPath(relative)) == nil {
                try await localStorage.moveFile(sourcePath: aside, targetPath: localPath(relative))
            }
            return (false, nil)
        }
        machine.noteChanged(id)
        if aside == nil { try await localStorage.deleteFile(filePath: localPath(relative)) }
        return (true, aside)
    }
}
