import Foundation
import Logging

extension AttachmentQueue {
    /// Checks what `saveFile(fileURL:)` was given: an existing regular file (directly or through symbolic
    /// links), not inside the attachments directory when it is to be moved. Returns whether it is a link.
    func checkSourceFile(_ path: String, moving: Bool) throws -> Bool {
        guard let entry = try files.info(atPath: path) else {
            throw AttachmentError(code: .localFileNotFound, message: "no file to save at \(path)", path: path)
        }
        guard let target = try files.infoFollowingLinks(atPath: path) else {
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

    /// Puts staged new files in place under their records' local names, then commits the records with the
    /// app's hook, in one transaction.
    ///
    /// The files are in place (and their folder flushed) before the records exist, so a record always has
    /// its file. Until the commit, each staging name (`.attachment-sync-save-<name>`, in `staged`, in the
    /// order of `records`) stays beside its file as a second name of it (a hard link; a copy where links
    /// are not supported): a crash in between leaves both names and no record, and startup then knows the
    /// file is an uncommitted save and removes it. If the commit fails, the files are removed (unless the
    /// records exist after all) and the error rethrown. A file already at a local name is never replaced.
    func placeAndCommit(
        _ records: [AttachmentRecord], staged: [String], durably: Bool, claimed: [String],
        updateHook: @escaping @Sendable (SqlTransaction, [Attachment]) throws -> Void
    ) async throws -> [Attachment] {
        var placed: [String] = []
        do {
            var flushFolder = false
            for (record, staged) in zip(records, staged) {
                guard let localName = record.localPath else {
                    throw AttachmentError(
                        code: .invalidState, message: "a new attachment has no local file", attachmentId: record.id)
                }
                let finalPath = localPath(localName)
                if try await localStorage.fileExists(filePath: finalPath) {
                    throw AttachmentError(
                        code: .alreadyExists,
                        message: "a file named \(String(reflecting: localName)) is already in the attachments "
                            + "directory (attachment \(String(reflecting: record.id))'s file); it was left alone",
                        attachmentId: record.id, name: localName, path: finalPath)
                }
                if localStorage.plainFileURL(filePath: finalPath) != nil {
                    flushFolder = true
                    do {
                        try files.link(staged, to: finalPath)
                        placed.append(finalPath)
                    } catch let error as AttachmentError where (error.underlying as? POSIXError)?.code != .EEXIST {
                        // No hard links on this volume: a copy is the twin.
                        placed.append(finalPath)
                        try await files.copy(from: staged, to: finalPath, hashing: false)
                        try setAttributes(of: finalPath, as: .savedContent)
                    }
                } else {
                    placed.append(finalPath)
                    try await localStorage.copyFile(sourcePath: staged, targetPath: finalPath)
                }
            }
            if flushFolder {
                let (files, folder) = (files, attachmentsDirectory.path)
                try await onBlockingThread { try files.synchronizeDirectory(atPath: folder) }
            }
        } catch {
            for path in placed { try? await localStorage.deleteFile(filePath: path) }
            for path in staged { try? await localStorage.deleteFile(filePath: path) }
            throw error
        }
        let committed: [Attachment]
        do {
            committed = try await commitNewRecords(records, durably: durably, claimed: claimed, updateHook: updateHook)
        } catch {
            // One transaction: either every record exists or none does. Asked in a task of its own: the
            // caller's may be cancelled (a cancelled task's reads fail at once).
            let id = records[0].id
            let (db, store) = (db, store)
            let exists = try? await Task {
                try await db.readTransaction { tx in try store.record(id: id, in: tx) != nil }
            }
            .value
            if exists == false {
                for path in placed { try? await localStorage.deleteFile(filePath: path) }
            }
            // Unknown: both names stay, and startup, which can tell, removes the pair or the staging name.
            if exists != nil {
                for path in staged { try? await localStorage.deleteFile(filePath: path) }
            }
            throw error
        }
        // Committed: the twins have done their job. One left behind (this fails, or a crash) is removed at
        // startup.
        for (record, staged) in zip(records, staged) {
            do {
                try await localStorage.deleteFile(filePath: staged)
            } catch {
                logError("a staging file could not be removed; startup will", error, id: record.id)
            }
        }
        return committed
    }

    /// Inserts new records and runs the app's hook, in one transaction (flushed to stable storage before it
    /// returns when `durably`), which also ends this process's claims on the `claimed` file names. Throws
    /// ``AttachmentError/Code-swift.struct/alreadyExists`` when an id, or a remote filename, is another
    /// attachment's, and ``AttachmentError/Code-swift.struct/conflict`` when another process's clean-up ended
    /// a claim first (its files may be gone).
    func commitNewRecords(
        _ records: [AttachmentRecord],
        durably: Bool = false,
        claimed: [String] = [],
        updateHook: @escaping @Sendable (SqlTransaction, [Attachment]) throws -> Void
    ) async throws -> [Attachment] {
        let store = store
        let directory = attachmentsDirectory
        let timestamps = records.map { _ in self.timestamps.next() }
        let usedAt = wallClock.milliseconds()
        let claims = claims
        let body: @Sendable (SqlTransaction) throws -> [Attachment] = { tx in
            if !claimed.isEmpty, try claims.endSaves(claimed, of: .current, in: tx) != claimed.count {
                throw AttachmentError(
                    code: .conflict,
                    message: "another process of the app removed the files of this save before it could commit "
                        + "(it took this process for gone, or the save for abandoned after an hour); nothing was "
                        + "saved: save again",
                    attachmentId: records.first?.id)
            }
            var attachments: [Attachment] = []
            attachments.reserveCapacity(records.count)
            for (record, timestamp) in zip(records, timestamps) {
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
                attachments.append(stamped.attachment(in: directory))
            }
            try updateHook(tx, attachments)
            return attachments
        }
        let attachments =
            durably ? try await db.durableWriteTransaction(body) : try await db.writeTransaction(body)
        for record in records { machine.noteChanged(record.id) }
        return attachments
    }
}
