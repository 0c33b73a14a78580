import Foundation
import Logging

extension AttachmentQueue {
    /// Saves many new attachments at once and queues them for upload: one transaction for all their
    /// records and `updateHook`, and one flush for all their files. For imports (a camera roll, a folder),
    /// where it is several times faster than one `saveFile` call per file.
    ///
    /// All or nothing, like `saveFile`: when anything fails (a bad name, a taken id, a missing file, the
    /// hook), no record and no file of the batch is left, no file handed over with `moveFile` is touched,
    /// and the error is rethrown. When it returns, every record is committed and every file is on stable
    /// storage. A crash at any moment leaves each original, or the committed attachments, or both.
    ///
    /// ```swift
    /// let saved = try await queue.saveFiles(
    ///     pictures.map { AttachmentQueue.NewFile(fileURL: $0, mediaType: "image/jpeg") }
    /// ) { tx, attachments in
    ///     for attachment in attachments {
    ///         try tx.execute(
    ///             sql: "INSERT INTO photos (id, album_id, attachment_id) VALUES (uuid(), ?, ?)",
    ///             arguments: [albumId, attachment.id])
    ///     }
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - files: The new attachments, saved in this order (their records' timestamps, and so their upload
    ///     order, follow it).
    ///   - updateHook: Runs once, inside the transaction that creates the records, with the attachments in
    ///     the order of `files`. The default does nothing.
    /// - Returns: The new records, in ``AttachmentState/queuedUpload``, in the order of `files`.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/alreadyExists`` when an id
    ///   (or a file name) is taken or appears twice in `files`, and the errors of the single `saveFile`
    ///   calls, for the first item that has one.
    @discardableResult
    public func saveFiles(
        _ files: [NewFile],
        updateHook: @escaping @Sendable (SqlTransaction, [Attachment]) throws -> Void = { _, _ in }
    ) async throws -> [Attachment] {
        guard !files.isEmpty else { return [] }
        return try await operation { try await saveBatch(files, updateHook: updateHook) }
    }

    /// A new attachment of a batch on its way in: its names and, once staged, its size and hash.
    private struct Staging {
        var item: NewFile
        var names: (id: String, filename: String, localName: String)
        var staged: String
        /// The caller's file to remove after the commit (`moveFile`).
        var source: String?
        var size: Int64 = 0
        var sha256: String = ""
        /// Whether the staged file is a plain file this queue wrote (and must flush), not the adapter's.
        var plain = false
    }

    /// Saves a batch (of one, for the single `saveFile` calls): names checked and reserved, every file
    /// staged under its `.attachment-sync-save-` name, all flushed at once, each given its final name (a
    /// second name of the same file, so a crash before the commit leaves a staged twin that startup
    /// removes), the folder flushed, then one transaction for the records and the hook; the staged names
    /// go last. On failure, whatever was written is removed again.
    func saveBatch(
        _ files: [NewFile], updateHook: @escaping @Sendable (SqlTransaction, [Attachment]) throws -> Void
    ) async throws -> [Attachment] {
        var batch: [Staging] = []
        defer { for entry in batch { machine.release(entry.names.id) } }
        var ids: Set<String> = []
        for item in files {
            var source: String?
            var ext = item.fileExtension
            if case .file(let url, let moveFile) = item.content {
                let path = url.standardizedFileURL.path
                _ = try checkSourceFile(path, moving: moveFile)
                if ext == nil, !url.pathExtension.isEmpty { ext = url.pathExtension }
                if moveFile { source = path }
            }
            let names = try newAttachmentNames(id: item.id, fileExtension: ext)
            guard ids.insert(names.id).inserted else {
                throw AttachmentError(
                    code: .alreadyExists,
                    message: "attachment \(String(reflecting: names.id)) appears twice in the batch",
                    attachmentId: names.id)
            }
            guard machine.reserve(names.id) else {
                throw AttachmentError(
                    code: .alreadyExists, message: "attachment \(String(reflecting: names.id)) is being saved",
                    attachmentId: names.id)
            }
            batch.append(
                Staging(
                    item: item, names: names, staged: localPath(FileName.savingName(for: names.localName)),
                    source: source))
        }
        let store = store
        let batchIds = ids
        let taken = try await db.readTransaction { tx in try store.records(ids: batchIds, in: tx).first?.id }
        if let taken {
            throw AttachmentError(
                code: .alreadyExists, message: "an attachment with id \(String(reflecting: taken)) already exists",
                attachmentId: taken)
        }

        // Claimed before any file exists, so another process's clean-up never takes them for leftovers; the
        // commit ends the claims, and fails if another process ended them first (it found this one gone).
        let claims = claims
        let claimed = batch.map(\.names.localName)
        let claimedAt = wallClock.milliseconds()
        // Noted as running before the claim exists: this process's clean-up never finds it not running.
        claims.noteSavesInProgress(claimed, true)
        defer { claims.noteSavesInProgress(claimed, false) }
        if let busy = try await db.writeTransaction({ tx in
            try claims.claimSaves(claimed, for: .current, now: claimedAt, in: tx)
        }) {
            throw AttachmentError(
                code: .alreadyExists,
                message: "another process of the app is saving the file \(String(reflecting: busy)) right now",
                name: busy)
        }
        do {
            return try await saveClaimed(&batch, claimed: claimed, updateHook: updateHook)
        } catch {
            // In a task of its own: the caller's may be cancelled (a cancelled task's writes fail at once).
            _ = try? await Task { [db] in
                try await db.writeTransaction { tx in try claims.endSaves(claimed, of: .current, in: tx) }
            }
            .value
            throw error
        }
    }

    /// The rest of ``saveBatch(_:updateHook:)``, once the batch's names are claimed: stages, places and
    /// commits.
    private func saveClaimed(
        _ batch: inout [Staging], claimed: [String],
        updateHook: @escaping @Sendable (SqlTransaction, [Attachment]) throws -> Void
    ) async throws -> [Attachment] {
        var written: [String] = []
        do {
            for index in batch.indices {
                written.append(batch[index].staged)
                try await stage(&batch[index])
            }
            let plain = batch.filter(\.plain).map(\.staged)
            if !plain.isEmpty { try await onBlockingThread { [files] in try files.synchronizeFiles(atPaths: plain) } }
        } catch {
            for path in written { try? await localStorage.deleteFile(filePath: path) }
            throw error
        }

        let records = batch.map { entry in
            AttachmentRecord(
                id: entry.names.id, filename: entry.names.filename, state: .queuedUpload, timestamp: 0,
                localPath: entry.names.localName, mediaType: entry.item.mediaType, size: entry.size,
                metaData: entry.item.metaData, contentHash: entry.sha256)
        }
        let committed = try await placeAndCommit(
            records, staged: batch.map(\.staged), durably: batch.contains { $0.source != nil }, claimed: claimed,
            updateHook: updateHook)

        // The records are on stable storage: the originals handed over are redundant now. Failing to remove
        // one loses nothing, so it is not an error (the call has succeeded).
        var folders: Set<String> = []
        for entry in batch {
            guard let source = entry.source else { continue }
            do {
                try self.files.removeFile(atPath: source)
                folders.insert((source as NSString).deletingLastPathComponent)
            } catch {
                logger.warning(
                    "the saved file could not be removed from where it was; it is left in place",
                    metadata: ["attachment": "\(entry.names.id)", "file": "\(source)", "error": "\(error)"])
            }
        }
        for folder in folders.sorted() {
            do {
                try await onBlockingThread { [files] in try files.synchronizeDirectory(atPath: folder) }
            } catch {
                logger.warning(
                    "a folder whose saved files were removed could not be flushed",
                    metadata: ["folder": "\(folder)", "error": "\(error)"])
            }
        }
        for entry in batch {
            logger.debug("saved", metadata: ["attachment": "\(entry.names.id)", "bytes": "\(entry.size)"])
        }
        // The pass the new records triggered skipped them while they were reserved: ask for another.
        trigger()
        return committed
    }

    /// Writes one new attachment's content under its staging name, unflushed when it is a plain file (the
    /// batch flushes them together), and records its size and SHA-256.
    private func stage(_ entry: inout Staging) async throws {
        let staged = entry.staged
        if localStorage.plainFileURL(filePath: staged) != nil {
            entry.plain = true
            try files.removeFile(atPath: staged)
            switch entry.item.content {
            case .data(let data):
                // Written and hashed off the actor: a large picture takes a while.
                entry.sha256 = try await onBlockingThread { [files] in
                    try files.write(data, toPath: staged, flushing: false)
                    try self.setAttributes(of: staged, as: .savedContent)
                    return FileStreaming.sha256(data)
                }
                entry.size = Int64(data.count)
            case .file(let url, let moveFile):
                let source = url.standardizedFileURL.path
                // A second name for the caller's file (no bytes copied), when moving within one volume.
                if moveFile, try files.info(atPath: source)?.kind != .symbolicLink,
                    (try? files.link(source, to: staged)) != nil
                {
                    // The caller's file itself: whatever class and backup exclusion it had come with it.
                    try setAttributes(of: staged, as: .adoptedFile)
                    (entry.size, entry.sha256) = try await files.digest(ofFileAt: staged)
                } else {
                    let copied = try await files.copy(from: source, to: staged, flushing: false)
                    try setAttributes(of: staged, as: .savedContent)
                    (entry.size, entry.sha256) = (copied.size, copied.sha256 ?? "")
                }
            }
        } else {
            // The local adapter transforms what it stores: it can only take the content as data.
            let data: Data
            switch entry.item.content {
            case .data(let bytes): data = bytes
            case .file(let url, _):
                let source = url.standardizedFileURL.path
                data = try fileSystem(path: source) { try Data(contentsOf: URL(fileURLWithPath: source)) }
            }
            _ = try await localStorage.saveFile(filePath: staged, data: data)
            (entry.size, entry.sha256) = (Int64(data.count), FileStreaming.sha256(data))
        }
    }
}
