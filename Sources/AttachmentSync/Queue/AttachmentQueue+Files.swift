import Foundation

extension AttachmentQueue {
    /// Saves a new attachment's file and queues it for upload; `updateHook` runs in the same transaction,
    /// so the app's row that refers to the attachment is written together with its record.
    ///
    /// All or nothing: when the hook throws (or anything else fails), no record and no file are left, and
    /// the error is rethrown; when it returns, the record is committed and its file is in place (written to
    /// stable storage before the commit). The call never waits for transfers in flight.
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
    ///   or extension that cannot name a file (an id may not contain `.`, as the remote file is named
    ///   `<id>.<ext>`), ``AttachmentError/Code-swift.struct/alreadyExists`` when the id (or that file name)
    ///   is taken; the hook's error; database and file system errors.
    @discardableResult
    public func saveFile(
        data: Data,
        mediaType: String?,
        fileExtension: String?,
        metaData: String? = nil,
        id: String? = nil,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void = { _, _ in }
    ) async throws -> Attachment {
        try await operation {
            let names = try await newAttachmentNames(id: id, fileExtension: fileExtension)
            defer { machine.release(names.id) }
            let record = AttachmentRecord(
                id: names.id, filename: names.filename, state: .queuedUpload, timestamp: 0,
                localPath: names.localName, mediaType: mediaType, size: Int64(data.count), metaData: metaData,
                contentHash: FileStreaming.sha256(data))
            let staged = localPath(FileName.savingName(for: names.localName))
            do {
                if localStorage.plainFileURL(filePath: staged) != nil {
                    try files.removeFile(atPath: staged)
                    try files.writeDurably(data, toPath: staged)
                } else {
                    _ = try await localStorage.saveFile(filePath: staged, data: data)
                }
            } catch {
                try? await localStorage.deleteFile(filePath: staged)
                throw error
            }
            let committed = try await placeAndCommit(
                record, staged: staged, durably: false, updateHook: updateHook)
            logger.debug("saved", metadata: ["attachment": "\(names.id)", "bytes": "\(data.count)"])
            // The pass the new record triggered skipped it while it was reserved: ask for another.
            trigger()
            return committed
        }
    }

    /// Saves a new attachment from an existing file and queues it for upload, without reading the file
    /// into memory: it is copied (or, with `moveFile`, taken over) into the attachments directory in chunks
    /// while its SHA-256 is computed. `updateHook` runs in the transaction that creates the record.
    ///
    /// The file handed over is never lost:
    /// - With `moveFile`, the file is first given a second name in the attachments directory (a hard link,
    ///   when both are on one volume; otherwise a copy), and the original is removed only once the record
    ///   has been committed to stable storage. A crash at any moment leaves the original, or the committed
    ///   attachment, or both; never neither.
    /// - All or nothing: when the hook throws (or anything else fails), no record and no copy are left and
    ///   the original is untouched. Once the record is committed nothing else can fail: if the original
    ///   cannot be removed, it stays where it is and a warning is logged.
    /// - A symbolic link is followed: the attachment holds the bytes it points to, and with `moveFile` only
    ///   the link is removed. A folder, FIFO or device is refused.
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
    ///   - moveFile: Whether the attachment takes the file over (it is removed from `fileURL` once the record
    ///     is committed) instead of copying it. The default is `false`.
    ///   - updateHook: Runs inside the transaction that creates the record. The default does nothing.
    /// - Returns: The new record, in ``AttachmentState/queuedUpload``.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/localFileNotFound`` when
    ///   there is no file at `fileURL`, ``AttachmentError/Code-swift.struct/unsupported`` when it is not a
    ///   regular file, ``AttachmentError/Code-swift.struct/invalidState`` when `moveFile` is asked of a file
    ///   inside the attachments directory, and the errors of
    ///   ``saveFile(data:mediaType:fileExtension:metaData:id:updateHook:)``.
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
        try await operation {
            let source = fileURL.standardizedFileURL.path
            let isLink = try checkSourceFile(source, moving: moveFile)
            let names = try await newAttachmentNames(
                id: id, fileExtension: fileExtension ?? (fileURL.pathExtension.isEmpty ? nil : fileURL.pathExtension))
            defer { machine.release(names.id) }

            let staged = localPath(FileName.savingName(for: names.localName))
            let size: Int64
            let sha256: String
            if localStorage.plainFileURL(filePath: staged) != nil {
                do {
                    try files.removeFile(atPath: staged)
                    // A second name for the caller's file (no bytes copied), when moving within one volume.
                    if moveFile, !isLink, (try? files.link(source, to: staged)) != nil {
                        try files.synchronizeFile(atPath: staged)
                        (size, sha256) = try await files.digest(ofFileAt: staged)
                    } else {
                        let copied = try await files.copy(from: source, to: staged)
                        (size, sha256) = (copied.size, copied.sha256 ?? "")
                    }
                } catch {
                    try? files.removeFile(atPath: staged)
                    throw error
                }
            } else {
                // The local adapter transforms what it stores: it can only take the content as data.
                let data = try fileSystem(path: source) { try Data(contentsOf: URL(fileURLWithPath: source)) }
                do {
                    _ = try await localStorage.saveFile(filePath: staged, data: data)
                } catch {
                    try? await localStorage.deleteFile(filePath: staged)
                    throw error
                }
                (size, sha256) = (Int64(data.count), FileStreaming.sha256(data))
            }
            let record = AttachmentRecord(
                id: names.id, filename: names.filename, state: .queuedUpload, timestamp: 0,
                localPath: names.localName, mediaType: mediaType, size: size, metaData: metaData, contentHash: sha256)
            let committed = try await placeAndCommit(
                record, staged: staged, durably: moveFile, updateHook: updateHook)
            if moveFile {
                // The record is on stable storage: the original is redundant now. Failing to remove it loses
                // nothing, so it is not an error (the call has succeeded).
                do {
                    try files.removeFile(atPath: source)
                    try files.synchronizeDirectory(atPath: (source as NSString).deletingLastPathComponent)
                } catch {
                    logger.warning(
                        "the saved file could not be removed from where it was; it is left in place",
                        metadata: ["attachment": "\(names.id)", "file": "\(source)", "error": "\(error)"])
                }
            }
            logger.debug("saved from a file", metadata: ["attachment": "\(names.id)", "bytes": "\(size)"])
            trigger()
            return committed
        }
    }

    /// The id, remote filename and local file name of a new attachment, validated, with the id reserved
    /// (no transfer starts for it, no other save takes it) and free in the table. The caller releases the
    /// reservation.
    private func newAttachmentNames(id: String?, fileExtension: String?) async throws
        -> (id: String, filename: String, localName: String)
    {
        let id = id ?? UUID().uuidString.lowercased()
        let ext = try FileName.normalizedExtension(fileExtension, attachmentId: id)
        let filename = try FileName.derivedFilename(id: id, fileExtension: ext)
        let localName = try FileName.localName(id: id, fileExtension: ext)
        guard machine.reserve(id) else {
            throw AttachmentError(
                code: .alreadyExists, message: "attachment \(String(reflecting: id)) is being saved", attachmentId: id)
        }
        do {
            let store = store
            if try await db.readTransaction({ tx in try store.record(id: id, in: tx) }) != nil {
                throw AttachmentError(
                    code: .alreadyExists, message: "an attachment with id \(String(reflecting: id)) already exists",
                    attachmentId: id)
            }
        } catch {
            machine.release(id)
            throw error
        }
        return (id, filename, localName)
    }

    /// Checks what `saveFile(fileURL:)` was given: an existing regular file (directly or through symbolic
    /// links), not inside the attachments directory when it is to be moved. Returns whether it is a link.
    private func checkSourceFile(_ path: String, moving: Bool) throws -> Bool {
        guard let entry = files.info(atPath: path) else {
            throw AttachmentError(code: .localFileNotFound, message: "no file to save at \(path)", path: path)
        }
        guard let target = files.infoFollowingLinks(atPath: path) else {
            throw AttachmentError(
                code: .localFileNotFound, message: "\(path) is a symbolic link to nothing", path: path)
        }
        guard target.kind == .regular else {
            throw AttachmentError(
                code: .unsupported,
                message: "\(path) is not a regular file (a folder, FIFO, socket or device cannot be saved)",
                path: path)
        }
        if moving {
            let resolved = URL(fileURLWithPath: path).resolvingSymlinksInPath().standardizedFileURL.path
            let directory = attachmentsDirectory.resolvingSymlinksInPath().standardizedFileURL.path
            if resolved.hasPrefix(directory.hasSuffix("/") ? directory : directory + "/") {
                throw AttachmentError(
                    code: .invalidState,
                    message: "cannot move \(path) into the attachments: it is inside the attachments directory "
                        + "(save a copy instead)",
                    path: path)
            }
        }
        return entry.kind == .symbolicLink
    }

    /// Puts a staged new file in place under the record's local name, then commits the record with the
    /// app's hook.
    ///
    /// The file is in place (and its folder flushed) before the record exists, so a record always has its
    /// file. Until the commit, the staging name `staged` (`.attachment-sync-save-<name>`) stays beside it as
    /// a second name of the same file (a hard link; a copy where links are not supported): a crash in
    /// between leaves both names and no record, and startup then knows the file is an uncommitted save and
    /// removes it. If the commit fails, the file is removed (unless a record claims it after all) and the
    /// error rethrown. A file already at the local name is never replaced.
    private func placeAndCommit(
        _ record: AttachmentRecord, staged: String, durably: Bool,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void
    ) async throws -> Attachment {
        guard let localName = record.localPath else {
            throw AttachmentError(
                code: .invalidState, message: "a new attachment has no local file", attachmentId: record.id)
        }
        let finalPath = localPath(localName)
        var placed = false
        do {
            if try await localStorage.fileExists(filePath: finalPath) {
                throw AttachmentError(
                    code: .alreadyExists,
                    message: "a file named \(String(reflecting: localName)) is already in the attachments directory "
                        + "(attachment \(String(reflecting: record.id))'s file); it was left alone",
                    attachmentId: record.id, name: localName, path: finalPath)
            }
            if localStorage.plainFileURL(filePath: finalPath) != nil {
                do {
                    try files.link(staged, to: finalPath)
                    placed = true
                } catch let error as AttachmentError where (error.underlying as? POSIXError)?.code != .EEXIST {
                    // No hard links on this volume: a copy is the twin.
                    placed = true
                    try await files.copy(from: staged, to: finalPath, hashing: false)
                }
                try files.synchronizeDirectory(atPath: attachmentsDirectory.path)
            } else {
                placed = true
                try await localStorage.copyFile(sourcePath: staged, targetPath: finalPath)
            }
        } catch {
            if placed { try? await localStorage.deleteFile(filePath: finalPath) }
            try? await localStorage.deleteFile(filePath: staged)
            throw error
        }
        let committed: Attachment
        do {
            committed = try await commitNewRecord(record, durably: durably, updateHook: updateHook)
        } catch {
            let id = record.id
            let store = store
            let exists = try? await db.readTransaction { tx in try store.record(id: id, in: tx) != nil }
            if exists == false { try? await localStorage.deleteFile(filePath: finalPath) }
            try? await localStorage.deleteFile(filePath: staged)
            throw error
        }
        // Committed: the twin has done its job. One left behind (this fails, or a crash) is removed at startup.
        do {
            try await localStorage.deleteFile(filePath: staged)
        } catch {
            logError("a staging file could not be removed; startup will", error, id: record.id)
        }
        return committed
    }

    /// Inserts a new record and runs the app's hook, in one transaction (flushed to stable storage before it
    /// returns when `durably`). Throws ``AttachmentError/Code-swift.struct/alreadyExists`` when the id, or
    /// the remote filename, is another attachment's.
    func commitNewRecord(
        _ record: AttachmentRecord,
        durably: Bool = false,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void
    ) async throws -> Attachment {
        let store = store
        let directory = attachmentsDirectory
        let timestamp = timestamps.next()
        let usedAt = Self.milliseconds(configuration.currentDate())
        let body: @Sendable (SqlTransaction) throws -> Attachment = { tx in
            if try store.record(id: record.id, in: tx) != nil {
                throw AttachmentError(
                    code: .alreadyExists,
                    message: "an attachment with id \(String(reflecting: record.id)) already exists",
                    attachmentId: record.id)
            }
            if let owner = try store.owners(ofFilename: record.filename, localPath: nil, except: record.id, in: tx)
                .first
            {
                throw AttachmentError(
                    code: .alreadyExists,
                    message: "the file name \(String(reflecting: record.filename)) is attachment "
                        + "\(String(reflecting: owner))'s; two attachments cannot share a file",
                    attachmentId: record.id, name: record.filename)
            }
            var stamped = record
            stamped.timestamp = timestamp
            stamped.lastUsedAt = usedAt
            try store.insert(stamped, in: tx)
            let attachment = stamped.attachment(in: directory)
            try updateHook(tx, attachment)
            return attachment
        }
        let attachment =
            durably ? try await db.durableWriteTransaction(body) : try await db.writeTransaction(body)
        machine.noteChanged(record.id)
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
    @discardableResult
    public func deleteFile(
        attachmentId: String,
        updateHook: @escaping @Sendable (SqlTransaction, Attachment) throws -> Void = { _, _ in }
    ) async throws -> Attachment {
        try await operation {
            let store = store
            let directory = attachmentsDirectory
            let timestamp = timestamps.next()
            let runningBefore = machine.handle(of: attachmentId)
            // Flushed to stable storage before the local file goes: a power loss must not bring back a
            // record (and the app's row) whose file was deleted.
            let record = try await db.durableWriteTransaction { tx -> AttachmentRecord in
                guard var record = try store.record(id: attachmentId, in: tx) else {
                    throw AttachmentError(
                        code: .attachmentNotFound,
                        message: "no attachment has id \(String(reflecting: attachmentId))",
                        attachmentId: attachmentId)
                }
                try store.transition(
                    id: attachmentId, from: record.state, to: .queuedDelete, timestamp: timestamp,
                    set: [("has_synced", false), ("given_up", nil)] + Self.retryStateCleared, in: tx)
                record.state = .queuedDelete
                record.hasSynced = false
                record.givenUp = nil
                record.timestamp = timestamp
                try updateHook(tx, record.attachment(in: directory))
                return record
            }
            machine.noteChanged(attachmentId)
            // An upload or download of the old state is pointless now; the delete starts once it has stopped.
            // Only that transfer is cancelled: the delete itself may already be running (the commit triggered
            // a pass while this call waited for it), and it must go on.
            if let task = machine.handle(of: attachmentId), task == runningBefore { task.cancel() }
            var result = record
            if let relative = record.localPath {
                // The delete is committed: from here on nothing is thrown. A file that cannot be removed now is
                // removed by the delete transfer (or at the next startup).
                do {
                    try await localStorage.deleteFile(filePath: localPath(relative))
                    try await db.writeTransaction { tx in
                        try store.update(id: attachmentId, ifState: .queuedDelete, set: [("local_uri", nil)], in: tx)
                    }
                    result.localPath = nil
                } catch {
                    logError("the deleted attachment's local file could not be removed yet", error, id: attachmentId)
                }
            }
            trigger()
            return result.attachment(in: directory)
        }
    }

    /// The name a new attachment's remote file gets: `<id>.<ext>`, or the id alone without an extension.
    ///
    /// ``saveFile(data:mediaType:fileExtension:metaData:id:updateHook:)`` names its files this way, and so
    /// does the queue for a watched item without a filename of its own.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidName`` naming an id
    ///   or extension that cannot name a file (an id may not contain `.` here).
    public nonisolated func resolveNewAttachmentFilename(attachmentId: String, fileExtension: String?) throws
        -> String
    {
        let ext = try FileName.normalizedExtension(fileExtension, attachmentId: attachmentId)
        return try FileName.derivedFilename(id: attachmentId, fileExtension: ext)
    }

    /// The absolute path of the local file of the attachment whose remote file is `filename`: where its
    /// content is (or will be, once downloaded).
    ///
    /// Local files are not always named like remote ones: an id other than a lowercase UUID is escaped so that
    /// no two ids share a file on any volume (`Photo.jpg` is kept as `^photo.jpg`). So ask here, or read
    /// ``Attachment/localUri``, rather than joining the folder and the filename yourself. The attachment is
    /// found by its filename; a filename no record has is taken as `<id>.<ext>`.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/invalidName`` naming a
    ///   filename that cannot be a file in the attachments directory; database errors.
    public func getLocalUri(_ filename: String) async throws -> String {
        try await waitForInit()
        let store = store
        let record = try await db.readTransaction { tx in
            try store.records(in: tx, where: "filename = ?", parameters: [filename]).first
        }
        let localName: String
        if let record {
            localName = try record.localPath ?? record.localName()
        } else {
            let parts = filename.split(separator: ".", maxSplits: 1, omittingEmptySubsequences: false)
            let id = String(parts[0])
            let ext = parts.count > 1 ? String(parts[1]) : nil
            localName = try FileName.localName(
                id: id, fileExtension: FileName.normalizedExtension(ext, attachmentId: id))
        }
        return attachmentsDirectory.appendingPathComponent(localName).path
    }

    /// Deletes the local files and records of archived attachments beyond
    /// ``Configuration/archivedCacheLimit`` now, oldest first (sync passes do it too). Remote copies are
    /// never deleted.
    public func expireCache() async throws {
        try await operation {
            try await trimArchive()
        }
    }

    /// Removes every attachment record and its local file, stopping transfers in flight. Remote copies
    /// are not deleted. Use it when a user signs out, say.
    ///
    /// This is the one call that discards content that never reached remote storage
    /// (``Attachment/isLocalOnly``): it does what it says.
    public func clearQueue() async throws {
        try await operation {
            for transfer in machine.transfers.values { transfer.handle?.cancel() }
            let store = store
            // First every record lets go of its file (so a crash in what follows leaves only files that
            // startup can attribute and remove), then the files go, then the records.
            let records = try await db.durableWriteTransaction { tx -> [AttachmentRecord] in
                let records = try store.records(in: tx)
                try tx.execute(
                    sql: "UPDATE \(store.table) SET state = 4, local_uri = NULL, given_up = NULL", parameters: [])
                return records
            }
            machine.tableCleared()
            for relative in records.compactMap(\.localPath) {
                try await localStorage.deleteFile(filePath: localPath(relative))
            }
            try await db.writeTransaction { tx in
                try tx.execute(sql: "DELETE FROM \(store.table)", parameters: [])
            }
            // Unfinished uploads the remote keeps to resume will never resume now.
            for record in records where record.state == .queuedUpload || record.givenUp == .queuedUpload {
                try? await remoteStorage.discardPartialUpload(attachment: record.attachment(in: attachmentsDirectory))
            }
            logger.debug("queue cleared", metadata: ["records": "\(records.count)"])
        }
    }
}
