import Foundation
import Logging

extension AttachmentQueue {
    /// Startup: checks the configuration and the table, creates the folders, then verifies records against
    /// the files on disk and cleans up what a crash may have left: all of it now, or (see
    /// ``Configuration/startupFileCheck``) the queued records now and the rest in the background.
    func initialize() async throws {
        try configuration.validate()
        try await checkTable()
        try await makeFolder(atPath: attachmentsDirectory.path)
        for subdirectory in configuration.subdirectories {
            try await makeFolder(atPath: localPath(subdirectory))
        }
        let claims = claims
        let handOffs = handOffContext?.store
        if configuration.backgroundTransfers != nil, handOffs == nil {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "backgroundTransfers needs a remote that forms requests ahead of time "
                    + "(BackgroundTransferForming); \(type(of: remoteStorage)) does not",
                name: "backgroundTransfers")
        }
        try await db.writeTransaction { tx in
            try claims.createTable(in: tx)
            try handOffs?.createTable(in: tx)
        }
        // Only the lease holder checks files and removes leftovers: two processes doing it at once would
        // act on each other's transfers in progress. The check is put off until the lease is taken.
        guard await takeLease() else {
            startupCheckDeferred = true
            logger.info(
                "another process of the app holds the transfer lease: this queue saves and deletes, and checks files once it takes the lease over"
            )
            startFollowingNetwork()
            return
        }
        do {
            try await checkFilesAtStartup()
        } catch {
            await releaseLeaseIfUnwanted()
            throw error
        }
        startFollowingNetwork()
        await releaseLeaseIfUnwanted()
    }

    /// Startup's check of files, with the lease held: all of it now, or the queued records now and the rest
    /// in the background.
    private func checkFilesAtStartup() async throws {
        let store = store
        if try await checksFilesInBackground() {
            // Transfers start from queued records only: those are made true before anything runs.
            let queued = try await db.readTransaction { tx in try store.startupEntries(in: tx, queuedOnly: true) }
            // A path per record is cheaper than a listing of a large folder, up to a point.
            let names = queued.count > 2_000 ? try files.contentsOfDirectory(atPath: attachmentsDirectory.path) : nil
            _ = try await verifyRecordsAgainstFiles(queued, listing: names, inBackground: false)
            startBackgroundCheck()
        } else {
            let records = try await db.readTransaction { tx in try store.startupEntries(in: tx) }
            let names: [String]? =
                localStorage.plainFileURL(filePath: attachmentsDirectory.path) != nil
                ? try files.contentsOfDirectory(atPath: attachmentsDirectory.path) : nil
            let unchanged = try await verifyRecordsAgainstFiles(records, listing: names, inBackground: false)
            try await removeLeftoverFiles(unchanged, inBackground: false)
        }
    }

    /// Startup's check, run when this queue takes the lease over from another process after its startup:
    /// the queued records now (no transfer of this queue runs before it), the rest in the background.
    func runDeferredStartupCheck() async throws {
        let store = store
        let queued = try await db.readTransaction { tx in try store.startupEntries(in: tx, queuedOnly: true) }
        _ = try await verifyRecordsAgainstFiles(queued, listing: nil, inBackground: false)
        if localStorage.plainFileURL(filePath: attachmentsDirectory.path) != nil {
            startBackgroundCheck()
        } else {
            let records = try await db.readTransaction { tx in try store.startupEntries(in: tx) }
            try await removeLeftoverFiles((nil, records), inBackground: false)
        }
    }

    /// Starts the check of synced and archived records and the clean-up in the background (unless one runs).
    private func startBackgroundCheck() {
        guard !backgroundFileCheckRunning else { return }
        backgroundFileCheckRunning = true
        machine.beginBackgroundCheck()
        backgroundFileCheck = Task {
            do {
                try await self.checkFilesInBackground()
            } catch {
                self.backgroundCheckEnded()
                throw error
            }
            self.backgroundCheckEnded()
        }
    }

    /// The background check ended: the lease is given up unless the queue still wants it, in a task of its
    /// own (``waitForStartupCheck()`` does not wait for a database write that other work may hold up).
    private func backgroundCheckEnded() {
        backgroundFileCheckRunning = false
        Task { await self.releaseLeaseIfUnwanted() }
    }

    /// Whether the check of synced and archived records and the clean-up run after startup: only with plain
    /// files, as ``Configuration/startupFileCheck`` says.
    private func checksFilesInBackground() async throws -> Bool {
        guard localStorage.plainFileURL(filePath: attachmentsDirectory.path) != nil else { return false }
        switch configuration.startupFileCheck {
        case .beforeReady: return false
        case .inBackground: return true
        case .automatic(let limit):
            let store = store
            return try await db.readTransaction { tx in try store.count(in: tx) } > limit
        }
    }

    /// Startup's check of every record and the clean-up, while the queue runs: one read of the records and
    /// one listing of the folder, taken after ``QueueStateMachine/beginBackgroundCheck()`` so that whatever
    /// the queue saves or transfers meanwhile is either in the read or remembered as touched, and left alone.
    private func checkFilesInBackground() async throws {
        defer { machine.endBackgroundCheck() }
        let store = store
        let files = files
        let directory = attachmentsDirectory.path
        do {
            var records: [AttachmentStore.StartupEntry]? = try await db.readTransaction { tx in
                try store.startupEntries(in: tx)
            }
            let count = records?.count ?? 0
            try Task.checkCancellation()
            // Off the actor and the cooperative pool: saves and transfers go on while the folder is listed.
            let names = try await onBlockingThread { try files.contentsOfDirectory(atPath: directory) }
            try Task.checkCancellation()
            let unchanged = try await verifyRecordsAgainstFiles(records ?? [], listing: names, inBackground: true)
            // Let go of the read before the clean-up reads the table again (when a record changed): a million
            // entries held twice is what the check's memory was.
            records = nil
            try await removeLeftoverFiles(unchanged, inBackground: true)
            logger.debug("startup's background check of files is done", metadata: ["records": "\(count)"])
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            logError("startup's background check of files failed; the next startup checks again", error, id: nil)
            throw error
        }
    }

    /// Throws ``AttachmentError/Code-swift.struct/invalidConfiguration`` unless the attachments table exists
    /// with every column the queue uses.
    private func checkTable() async throws {
        let store = store
        try await db.readTransaction { tx in try store.checkTable(in: tx) }
    }

    /// Makes the `local_uri` of `records` true:
    /// - an absolute path (older databases) becomes relative to the attachments directory;
    /// - a synced attachment whose file is missing is queued for download again;
    /// - an upload whose file is missing is completed from its staging file when `saveFile` was interrupted
    ///   after its commit, and archived otherwise (the only copy is lost);
    /// - an archived attachment whose file is missing just loses its `local_uri`;
    /// - a pending delete's file is removed.
    ///
    /// With a `listing` of the folder, it answers "is it there" for the names it holds; a name it lacks is
    /// looked up by its path before anything is concluded (a volume may list a name in another Unicode form
    /// than it was created with, and a file may have come since), so a file is never taken for missing
    /// because of the listing.
    ///
    /// `inBackground`, the queue is running: queued records are left alone (startup checked them before it
    /// ran), so are those saved or transferred since the check began, and each change is made only if the
    /// record is still in the state and at the path that were read.
    ///
    /// Returns, for the clean-up, the listing when nothing in the folder changed since, and the records
    /// when none of them changed.
    private func verifyRecordsAgainstFiles(
        _ records: [AttachmentStore.StartupEntry], listing names: [String]?, inBackground: Bool
    )
        async throws -> (listing: [String]?, records: [AttachmentStore.StartupEntry]?)
    {
        let store = store
        let directory = attachmentsDirectory.path
        // The common case, a file where its record says, needs nothing; finding the others is pure work
        // over every record, done off the actor.
        let attention = await Task.detached {
            Self.recordsNeedingCheck(records, listing: names, directory: directory, skippingQueued: inBackground)
        }.value
        var changedFiles = false
        var changedRecords = false
        for (record, relative, listed) in attention {
            if inBackground {
                try Task.checkCancellation()
                if machine.touchedDuringCheck?.contains(record.id) == true { continue }
            }
            guard let stored = record.localPath else { continue }
            let path = localPath(relative)
            changedRecords = true
            let exists = try await listed ? true : localStorage.fileExists(filePath: path)
            // Looked for only when an upload's file is missing (a path per record costs at 100,000 records).
            var stagingExists = false
            if !exists, record.state == .queuedUpload {
                stagingExists = try await localStorage.fileExists(filePath: savingPath(of: relative))
            }
            let timestamp = timestamps.next()
            switch StartupDecisionTable.verdict(state: record.state, fileExists: exists, stagingExists: stagingExists) {
            case .removeFile:
                changedFiles = true
                try await localStorage.deleteFile(filePath: path)
                try await db.writeTransaction { tx in
                    try store.update(id: record.id, ifState: .queuedDelete, set: .set(.localUri, nil), in: tx)
                }
            case .keep, .completeSave:
                if !exists {
                    changedFiles = true
                    try await localStorage.moveFile(sourcePath: savingPath(of: relative), targetPath: path)
                    logger.info("completed an interrupted save", metadata: ["attachment": "\(record.id)"])
                }
                if relative != stored {
                    try await db.writeTransaction { tx in
                        try store.update(
                            id: record.id, ifState: record.state, set: .set(.localUri, relative), ifLocalPath: stored,
                            in: tx)
                    }
                }
            case .downloadAgain:
                logger.warning(
                    "a synced file is missing; it will be downloaded again", metadata: ["attachment": "\(record.id)"])
                try await db.writeTransaction { tx in
                    try store.transition(
                        id: record.id, from: .synced, to: .queuedDownload, timestamp: timestamp,
                        set: .set(.localUri, nil), ifLocalPath: stored, in: tx)
                }
            case .giveUpUpload:
                logger.error(
                    "a file waiting for upload is missing; its upload is given up and the attachment archived",
                    metadata: ["attachment": "\(record.id)"])
                try await db.writeTransaction { tx in
                    try store.transition(
                        id: record.id, from: .queuedUpload, to: .archived, timestamp: timestamp,
                        set: .set(.localUri, nil) + .set(.givenUp, AttachmentState.queuedUpload.rawValue)
                            + .set(.lastError, "the file to upload was missing at startup"), ifLocalPath: stored, in: tx
                    )
                }
            case .release:
                try await db.writeTransaction { tx in
                    try store.update(
                        id: record.id, ifState: record.state, set: .set(.localUri, nil), ifLocalPath: stored, in: tx)
                }
            }
            // The watch's reconcile may have read the record already.
            machine.noteChanged(record.id)
        }
        return (changedFiles ? nil : names, changedRecords ? nil : records)
    }

    /// The records among `records` that need a look, each with its path relative to `directory` and whether
    /// `listing` holds it: every record with a local file unless the listing holds it under the stored
    /// (relative) path and it is not a pending delete; `skippingQueued`, only synced and archived ones.
    private nonisolated static func recordsNeedingCheck(
        _ records: [AttachmentStore.StartupEntry], listing: [String]?, directory: String, skippingQueued: Bool
    ) -> [(record: AttachmentStore.StartupEntry, relative: String, listed: Bool)] {
        let listed = Set(listing ?? [])
        var attention: [(record: AttachmentStore.StartupEntry, relative: String, listed: Bool)] = []
        for record in records {
            guard let stored = record.localPath else { continue }
            if skippingQueued, record.state != .synced, record.state != .archived { continue }
            let relative = relativePath(stored, directory: directory)
            let isListed = listed.contains(relative)
            if isListed, relative == stored, record.state != .queuedDelete { continue }
            attention.append((record, relative, isListed))
        }
        return attention
    }

    /// Where `saveFile` staged the file `relative` before its commit.
    func savingPath(of relative: String) -> String {
        localPath(FileName.savingName(for: relative))
    }

    /// `stored` relative to the attachments directory `directory`: as it is when already relative; for an
    /// absolute path, the part under the directory, else its last component.
    private nonisolated static func relativePath(_ stored: String, directory: String) -> String {
        guard stored.hasPrefix("/") || stored.hasPrefix("file:") else { return stored }
        let url =
            stored.hasPrefix("file:")
            ? (URL(string: stored) ?? URL(fileURLWithPath: stored)) : URL(fileURLWithPath: stored)
        let base = directory.hasSuffix("/") ? directory : directory + "/"
        let path = url.standardizedFileURL.path
        return path.hasPrefix(base) ? String(path.dropFirst(base.count)) : url.lastPathComponent
    }
}
