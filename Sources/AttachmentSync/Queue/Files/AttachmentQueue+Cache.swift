import Foundation
import Logging

extension AttachmentQueue {
    /// Deletes the local files and records of archived attachments beyond
    /// ``Configuration/archivedCacheLimit`` now, oldest first (sync passes do it too). Remote copies are
    /// never deleted.
    public func expireCache() async throws {
        try await operation {
            try await trimArchive()
        }
    }

    /// Deletes the local files and records of archived attachments beyond
    /// ``Configuration/archivedCacheLimit``, oldest first, one trim at a time. Remote copies are never
    /// touched.
    func trimArchive() async throws {
        while let running = archiveTrim { _ = await running.result }
        // The task clears its own slot as it ends, before anyone waiting for it resumes; clearing it from
        // here instead would leave waiters spinning on a finished task until this caller got the actor.
        let task = Task {
            defer { self.archiveTrim = nil }
            try await self.evictArchivedBeyondLimit()
        }
        archiveTrim = task
        try await task.value
    }

    func evictArchivedBeyondLimit() async throws {
        let store = store
        let limit = configuration.archivedCacheLimit
        let evictable = try await db.readTransaction { tx in try store.archivedBeyond(keep: limit, in: tx) }
        guard !evictable.isEmpty else { return }
        var evicted = 0
        for record in evictable where !machine.isTransferring(record.id) {
            guard try await evictArchived(record) else { continue }
            evicted += 1
        }
        logger.debug("evicted archived attachments", metadata: ["count": "\(evicted)"])
    }

    /// Evicts one archived attachment, record and file, unless it changed meanwhile (restored, say), in
    /// three steps each conditional on the one before: the record lets go of its file, the file goes, the
    /// record goes. A crash in between leaves a record without a file (harmless; evicted next time) or a
    /// file its record no longer claims (startup removes it); never a file nobody can attribute.
    func evictArchived(_ record: AttachmentRecord) async throws -> Bool {
        let store = store
        if let relative = record.localPath {
            guard await mayDeleteLocalCopy(of: record, why: "evicting it") else { return false }
            let released = try await db.writeTransaction { tx in
                try store.releaseArchivedContent(id: record.id, localPath: relative, in: tx)
            }
            guard released else { return false }
            machine.noteChanged(record.id)
            try await localStorage.deleteFile(filePath: localPath(relative))
        } else if let name = try? record.localName() {
            // Released earlier, and the file may have outlived it (its removal failed: the folder was out of
            // reach, say). Once the record is gone nothing could tell whose it is: it goes first.
            try await localStorage.deleteFile(filePath: localPath(name))
        }
        let deleted = try await db.writeTransaction { tx in try store.deleteReleasedArchived(id: record.id, in: tx) }
        if deleted { machine.noteChanged(record.id) }
        if record.localPath != nil {
            eventCenter.send(.evicted(attachmentId: record.id, bytes: record.size ?? 0))
            return true
        }
        return deleted
    }

    /// Keeps local content within ``Configuration/maxCacheBytes``: evicts the least recently used archived
    /// content first (record and file), then purges the least recently used on-demand content back to
    /// remote-only. Content waiting for upload, eagerly downloaded content, pinned content and content
    /// being transferred are never touched.
    func enforceCacheBudget() async throws {
        guard let budget = configuration.maxCacheBytes else { return }
        let policy = CachePolicy(budget: budget)
        let store = store
        let (used, candidates) = try await db.readTransaction { tx -> (Int64, [AttachmentRecord]) in
            let used = try store.localContentBytes(in: tx)
            guard used > budget else { return (used, []) }
            return (used, try store.evictable(in: tx))
        }
        guard used > budget else { return }
        let ordered = policy.evictionOrder(used: used, candidates: candidates, busy: machine.transferIDs)
        var remaining = used
        for record in ordered where remaining > budget && !machine.isTransferring(record.id) {
            guard let relative = record.localPath else { continue }
            if record.state == .archived {
                guard try await evictArchived(record) else { continue }
            } else {
                guard await mayDeleteLocalCopy(of: record, why: "evicting it"),
                    try await removeContent(of: record, relative: relative)
                else { continue }
                eventCenter.send(.evicted(attachmentId: record.id, bytes: record.size ?? 0))
            }
            remaining = remaining.subtractingClamped(max(0, record.size ?? 0))
        }
        if remaining > budget {
            // Every pass would say it again: `status` shows it (``QueueStatus/Cache``).
            logger.debug(
                "the cache stays over its budget: what is left is pinned, not uploaded yet, or downloaded eagerly",
                metadata: ["bytes": "\(remaining)", "budget": "\(budget)"])
        } else {
            logger.debug(
                "kept the cache within its budget", metadata: ["bytes": "\(remaining)", "budget": "\(budget)"])
        }
    }

    /// Deletes an attachment's local content but keeps its record, remote-only: ``Attachment/contentAvailable``
    /// becomes `false`, and ``download(attachmentId:)`` fetches it again. The remote copy is never touched.
    ///
    /// Purging an attachment without local content does nothing.
    ///
    /// - Returns: The attachment as it is now.
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``, or
    ///   ``AttachmentError/Code-swift.struct/invalidState`` when the content is not uploaded yet (purging
    ///   it would lose the only copy) or the attachment is being deleted.
    @discardableResult
    public func purge(attachmentId id: String) async throws -> Attachment {
        try await operation {
            guard let record = try await readRecord(id) else {
                throw AttachmentError(
                    code: .attachmentNotFound, message: "no attachment has id \(String(reflecting: id))",
                    attachmentId: id)
            }
            guard record.state == .synced || record.state == .archived, !record.isLocalOnly else {
                let why =
                    record.state == .queuedUpload || record.isLocalOnly
                    ? "is not uploaded yet: its local file is the only copy" : "is \(record.state)"
                throw AttachmentError(
                    code: .invalidState, message: "cannot purge attachment \(String(reflecting: id)): it \(why)",
                    attachmentId: id)
            }
            guard let relative = record.localPath else { return record.attachment(in: attachmentsDirectory) }
            switch await remoteCopyEvidence(for: record) {
            case .intact, .cannotAsk:
                break
            case .notIntact(let why):
                throw AttachmentError(
                    code: .invalidState,
                    message: "cannot purge attachment \(String(reflecting: id)): \(why), so its local file may be "
                        + "the only copy; it was kept", attachmentId: id)
            case .unreachable(let error):
                throw AttachmentError(
                    code: .remoteUnavailable,
                    message: "cannot purge attachment \(String(reflecting: id)): remote storage could not confirm "
                        + "it holds the content; the local file was kept", attachmentId: id, underlying: error)
            }
            guard try await removeContent(of: record, relative: relative) else {
                throw AttachmentError(
                    code: .invalidState, message: "attachment \(String(reflecting: id)) changed while purging it",
                    attachmentId: id)
            }
            eventCenter.send(.purged(attachmentId: id))
            var purged = record
            purged.localPath = nil
            return purged.attachment(in: attachmentsDirectory)
        }
    }

    /// Whether the local copy of `record` may be deleted because the remote has the content: remote storage
    /// confirms it (see ``remoteCopyEvidence(for:)``), or cannot be asked and the record says the content
    /// reached it. A remote that has lost or changed the file, or cannot be reached, keeps the local copy
    /// (logged; a later pass asks again).
    func mayDeleteLocalCopy(of record: AttachmentRecord, why: String) async -> Bool {
        guard record.hasSynced else { return false }
        switch await remoteCopyEvidence(for: record) {
        case .intact, .cannotAsk:
            return true
        case .notIntact(let reason):
            logger.warning(
                "kept a local file instead of \(why): remote storage does not hold its content",
                metadata: ["attachment": "\(record.id)", "remote": "\(reason)"])
            return false
        case .unreachable(let error):
            logError(
                "kept a local file instead of \(why): remote storage could not confirm its copy", error, id: record.id)
            return false
        }
    }

    /// Clears a record's `local_uri` (only if it is unchanged), then deletes the file. A crash in between
    /// leaves a file no record refers to, which startup removes.
    func removeContent(of record: AttachmentRecord, relative: String) async throws -> Bool {
        let store = store
        let cleared = try await db.writeTransaction { tx in
            try store.releaseUploadedContent(id: record.id, ifState: record.state, localPath: relative, in: tx)
        }
        guard cleared else { return false }
        machine.noteChanged(record.id)
        try await localStorage.deleteFile(filePath: localPath(relative))
        return true
    }

    /// Exempts an attachment's local content from eviction under ``Configuration/maxCacheBytes``.
    ///
    /// Pinning does not fetch anything: pin an on-demand attachment and ``download(attachmentId:)`` it to
    /// keep it available offline.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``.
    public func pin(attachmentId id: String) async throws {
        try await setPinned(true, id)
    }

    /// Makes an attachment's local content evictable again (see ``pin(attachmentId:)``).
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/attachmentNotFound``.
    public func unpin(attachmentId id: String) async throws {
        try await setPinned(false, id)
    }

    private func setPinned(_ pinned: Bool, _ id: String) async throws {
        try await operation { try await writePinned(pinned, id) }
    }

    private func writePinned(_ pinned: Bool, _ id: String) async throws {
        let store = store
        let changed = try await db.writeTransaction { tx in try store.setPinned(pinned, id: id, in: tx) }
        guard changed else {
            throw AttachmentError(
                code: .attachmentNotFound, message: "no attachment has id \(String(reflecting: id))", attachmentId: id)
        }
    }
}
