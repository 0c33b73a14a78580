import Foundation

extension AttachmentQueue {
    /// Saves a new attachment's file and queues it for upload; `updateHook` runs in the same transaction,
    /// so the app's row that refers to the attachment is written together with its record.
    ///
    /// All or nothing: when the hook throws (or anything else fails), no record and no file are left, and
    /// the error is rethrown. The call never waits for transfers in flight.
    ///
    /// ```swift
    /// let photo = try await queue.saveFile(data: jpeg, mediaType: "image/jpeg", fileExtension: "jpg") { tx, attachment in
    ///     try tx.execute(
    ///         sql: "UPDATE checklists SET photo_id = ? WHERE id = ?",
    ///         arguments: [attachment.id, checklistId]
    ///     )
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - data: The file's content.
    ///   - mediaType: Its media type, stored with the record.
    ///   - fileExtension: The extension the file is named with (`<id>.<ext>`), without the dot.
    ///   - metaData: The app's own metadata (JSON, say). The default is `nil`.
    ///   - id: The attachment's id. The default is `nil`: a new lowercase UUID.
    ///   - updateHook: Runs inside the transaction that creates the record. The default does nothing.
    /// - Returns: The new record, in ``AttachmentState/queuedUpload``.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidName`` for an id
    ///   or extension that cannot name a file, ``AttachmentError/Code-swift.struct/alreadyExists`` when the
    ///   id is taken; the hook's error; database and file system errors.
    @discardableResult
    public func saveFile(
        data: Data,
        mediaType: String?,
        fileExtension: String?,
        metaData: String? = nil,
        id: String? = nil,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void = { _, _ in }
    ) async throws -> Attachment {
        try await waitForInit()
        let id = id ?? UUID().uuidString.lowercased()
        let ext = try FileName.normalizedExtension(fileExtension, attachmentId: id)
        let localName = try FileName.localName(id: id, fileExtension: ext)
        guard reserved.insert(id).inserted else {
            throw AttachmentError(
                code: .alreadyExists, message: "attachment \(String(reflecting: id)) is being saved", attachmentId: id)
        }
        defer { reserved.remove(id) }

        let stagingPath = localPath(FileName.savingName(for: localName))
        let finalPath = localPath(localName)
        let record = AttachmentRecord(
            id: id,
            filename: localName,
            state: .queuedUpload,
            timestamp: 0,
            localPath: localName,
            mediaType: mediaType,
            size: Int64(data.count),
            metaData: metaData,
            contentHash: FileStreaming.sha256(data)
        )
        do {
            _ = try await localStorage.saveFile(filePath: stagingPath, data: data)
            let committed = try await commitNewRecord(record, updateHook: updateHook)
            // Until this rename the file lives under its staging name; startup completes an interrupted one.
            try await localStorage.moveFile(sourcePath: stagingPath, targetPath: finalPath)
            logger.debug("saved", metadata: ["attachment": "\(id)", "bytes": "\(data.count)"])
            // The pass the new record triggered skipped it while it was reserved: ask for another.
            trigger()
            return committed
        } catch {
            try? await localStorage.deleteFile(filePath: stagingPath)
            throw error
        }
    }

    /// Saves a new attachment from an existing file and queues it for upload, without reading the file
    /// into memory: it is copied (or, with `moveFile`, moved) into the attachments directory in chunks while
    /// its SHA-256 is computed. `updateHook` runs in the transaction that creates the record.
    ///
    /// All or nothing: when the hook throws (or anything else fails), no record and no copy are left, and
    /// a moved file is put back where it was.
    ///
    /// ```swift
    /// let video = try await queue.saveFile(fileURL: recordingURL, mediaType: "video/mp4", fileExtension: nil, moveFile: true) {
    ///     tx, attachment in
    ///     try tx.execute(sql: "UPDATE visits SET video_id = ? WHERE id = ?", arguments: [attachment.id, visitId])
    /// }
    /// ```
    ///
    /// - Parameters:
    ///   - fileURL: The file to adopt.
    ///   - mediaType: Its media type, stored with the record.
    ///   - fileExtension: The extension the attachment's file is named with. The default is `nil`: the
    ///     source file's extension.
    ///   - metaData: The app's own metadata. The default is `nil`.
    ///   - id: The attachment's id. The default is `nil`: a new lowercase UUID.
    ///   - moveFile: Whether to move the file instead of copying it (a rename when both are on one
    ///     volume). The default is `false`.
    ///   - updateHook: Runs inside the transaction that creates the record. The default does nothing.
    /// - Returns: The new record, in ``AttachmentState/queuedUpload``.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/localFileNotFound`` when
    ///   there is no file at `fileURL`, and the errors of ``saveFile(data:mediaType:fileExtension:metaData:id:updateHook:)``.
    @discardableResult
    public func saveFile(
        fileURL: URL,
        mediaType: String?,
        fileExtension: String? = nil,
        metaData: String? = nil,
        id: String? = nil,
        moveFile: Bool = false,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void = { _, _ in }
    ) async throws -> Attachment {
        try await waitForInit()
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: fileURL.path, isDirectory: &isDirectory), !isDirectory.boolValue
        else {
            throw AttachmentError(
                code: .localFileNotFound, message: "no file to save at \(fileURL.path)", path: fileURL.path)
        }
        let id = id ?? UUID().uuidString.lowercased()
        let ext = try FileName.normalizedExtension(
            fileExtension ?? (fileURL.pathExtension.isEmpty ? nil : fileURL.pathExtension), attachmentId: id)
        let localName = try FileName.localName(id: id, fileExtension: ext)
        let stagingPath = localPath(FileName.savingName(for: localName))
        guard let staging = localStorage.plainFileURL(filePath: stagingPath) else {
            // The local adapter transforms what it stores: it can only take the content as data.
            let data = try fileSystem(path: fileURL.path) { try Data(contentsOf: fileURL) }
            let saved = try await saveFile(
                data: data, mediaType: mediaType, fileExtension: ext, metaData: metaData, id: id,
                updateHook: updateHook)
            if moveFile { try? FileManager.default.removeItem(at: fileURL) }
            return saved
        }
        guard reserved.insert(id).inserted else {
            throw AttachmentError(
                code: .alreadyExists, message: "attachment \(String(reflecting: id)) is being saved", attachmentId: id)
        }
        defer { reserved.remove(id) }

        var moved = false
        do {
            let size: Int64
            let sha256: String
            if moveFile, (try? FileManagerStorageAdapter.rename(from: fileURL.path, to: staging.path)) != nil {
                moved = true
                (size, sha256) = try await FileStreaming.digest(of: staging)
            } else {
                (size, sha256) = try await FileStreaming.copy(from: fileURL, to: staging)
            }
            let record = AttachmentRecord(
                id: id, filename: localName, state: .queuedUpload, timestamp: 0, localPath: localName,
                mediaType: mediaType, size: size, metaData: metaData, contentHash: sha256)
            let committed = try await commitNewRecord(record, updateHook: updateHook)
            try await localStorage.moveFile(sourcePath: stagingPath, targetPath: localPath(localName))
            if moveFile && !moved { try? FileManager.default.removeItem(at: fileURL) }
            logger.debug("saved from a file", metadata: ["attachment": "\(id)", "bytes": "\(size)"])
            trigger()
            return committed
        } catch {
            if moved {
                try? FileManagerStorageAdapter.rename(from: staging.path, to: fileURL.path)
            } else {
                try? await localStorage.deleteFile(filePath: stagingPath)
            }
            throw error
        }
    }

    /// Inserts a new record and runs the app's hook, in one transaction.
    func commitNewRecord(
        _ record: AttachmentRecord,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void
    ) async throws -> Attachment {
        let store = store
        let directory = attachmentsDirectory
        let timestamp = timestamps.next()
        let usedAt = Self.milliseconds(configuration.currentDate())
        let attachment = try await db.writeTransaction { tx in
            if try store.record(id: record.id, in: tx) != nil {
                throw AttachmentError(
                    code: .alreadyExists,
                    message: "an attachment with id \(String(reflecting: record.id)) already exists",
                    attachmentId: record.id)
            }
            var stamped = record
            stamped.timestamp = timestamp
            stamped.lastUsedAt = usedAt
            try store.insert(stamped, in: tx)
            let attachment = stamped.attachment(in: directory)
            try updateHook(tx, attachment)
            return attachment
        }
        changedSinceReconcile.insert(record.id)
        return attachment
    }

    /// Deletes an attachment: its record moves to ``AttachmentState/queuedDelete`` and `updateHook` runs in
    /// the same transaction (to clear the app's reference); then the local file is removed, and the remote
    /// copy is deleted in the background, after which the record goes too.
    ///
    /// The record stays until the remote delete succeeds, so the remote copy is never orphaned. When the
    /// hook throws, nothing changes.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``
    ///   when no attachment has the id; the hook's error; database and file system errors.
    public func deleteFile(
        attachmentId: String,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void = { _, _ in }
    ) async throws {
        try await waitForInit()
        let store = store
        let directory = attachmentsDirectory
        let timestamp = timestamps.next()
        let runningBefore = transfers[attachmentId]?.task
        let record = try await db.writeTransaction { tx -> AttachmentRecord in
            guard var record = try store.record(id: attachmentId, in: tx) else {
                throw AttachmentError(
                    code: .attachmentNotFound,
                    message: "no attachment has id \(String(reflecting: attachmentId))",
                    attachmentId: attachmentId)
            }
            try store.transition(
                id: attachmentId, from: record.state, to: .queuedDelete, timestamp: timestamp,
                set: [("has_synced", false)], in: tx)
            record.state = .queuedDelete
            record.hasSynced = false
            record.timestamp = timestamp
            try updateHook(tx, record.attachment(in: directory))
            return record
        }
        changedSinceReconcile.insert(attachmentId)
        // An upload or download of the old state is pointless now; the delete starts once it has stopped.
        // Only that transfer is cancelled: the delete itself may already be running (the commit triggered
        // a pass while this call waited for it), and it must go on.
        if let transfer = transfers[attachmentId], transfer.task == runningBefore {
            transfer.task.cancel()
        }
        if let relative = record.localPath {
            try await localStorage.deleteFile(filePath: localPath(relative))
            try await db.writeTransaction { tx in
                try store.update(id: attachmentId, ifState: .queuedDelete, set: [("local_uri", nil)], in: tx)
            }
        }
        trigger()
    }

    /// Deletes the local files and records of archived attachments beyond
    /// ``Configuration/archivedCacheLimit`` now, oldest first (sync passes do it too). Remote copies are
    /// never deleted.
    public func expireCache() async throws {
        try await waitForInit()
        try await trimArchive()
    }

    /// Removes every attachment record and its local file, stopping transfers in flight. Remote copies
    /// are not deleted. Use it when a user signs out, say.
    public func clearQueue() async throws {
        try await waitForInit()
        for transfer in transfers.values { transfer.task.cancel() }
        let store = store
        let records = try await db.writeTransaction { tx -> [AttachmentRecord] in
            let records = try store.records(in: tx)
            try tx.execute(sql: "DELETE FROM \(store.table)", parameters: [])
            return records
        }
        reconciledWatch = nil
        tableClears += 1
        for relative in records.compactMap(\.localPath) {
            try await localStorage.deleteFile(filePath: localPath(relative))
        }
        logger.debug("queue cleared", metadata: ["records": "\(records.count)"])
    }
}
