import Foundation
import Logging

extension AttachmentQueue {
    /// Startup: checks the configuration and the table, creates the folders, then verifies every record
    /// against the files on disk and cleans up what a crash may have left.
    func initialize() async throws {
        try configuration.validate()
        try await checkTable()
        try await localStorage.makeDir(path: attachmentsDirectory.path)
        // Before anything is removed: another process's queue on this directory would lose saves in progress.
        if directoryLock == nil, localStorage.plainFileURL(filePath: attachmentsDirectory.path) != nil {
            directoryLock = try DirectoryLock.acquire(directory: attachmentsDirectory)
            if directoryLock == nil {
                logger.warning(
                    "the attachments directory cannot be locked on this file system; run no other queue on it",
                    metadata: ["directory": "\(attachmentsDirectory.path)"])
            }
        }
        for subdirectory in configuration.subdirectories {
            try await localStorage.makeDir(path: localPath(subdirectory))
        }
        let unchanged = try await verifyRecordsAgainstFiles()
        try await removeLeftoverFiles(unchanged)
        startFollowingNetwork()
    }

    /// Throws ``AttachmentError/Code-swift.struct/invalidConfiguration`` unless the attachments table exists
    /// with every column the queue uses.
    private func checkTable() async throws {
        let store = store
        try await db.readTransaction { tx in try store.checkTable(in: tx) }
    }

    /// Makes every record's `local_uri` true:
    /// - an absolute path (older databases) becomes relative to the attachments directory;
    /// - a synced attachment whose file is missing is queued for download again;
    /// - an upload whose file is missing is completed from its staging file when `saveFile` was interrupted
    ///   after its commit, and archived otherwise (the only copy is lost);
    /// - an archived attachment whose file is missing just loses its `local_uri`;
    /// - a pending delete's file is removed.
    ///
    /// With plain files, one listing of the folder answers "is it there" for the names it holds; a name it
    /// lacks is looked up by its path before anything is concluded (a volume may list a name in another
    /// Unicode form than it was created with), so a file is never taken for missing because of the listing.
    /// Returns, for the clean-up, the listing when nothing in the folder changed since, and the records
    /// read when none of them changed.
    private func verifyRecordsAgainstFiles() async throws -> (listing: [String]?, records: [AttachmentRecord]?) {
        let store = store
        let records = try await db.readTransaction { tx in try store.startupEntries(in: tx) }
        let names: [String]? =
            localStorage.plainFileURL(filePath: attachmentsDirectory.path) != nil
            ? try files.contentsOfDirectory(atPath: attachmentsDirectory.path) : nil
        let listed = Set(names ?? [])
        var changedFiles = false
        var changedRecords = false
        for record in records {
            guard let stored = record.localPath else { continue }
            let relative = relativePath(stored)
            // The common case, a file where its record says, needs nothing (not even its path).
            if listed.contains(relative), relative == stored, record.state != .queuedDelete { continue }
            let path = localPath(relative)
            changedRecords = true
            let exists = try await listed.contains(relative) ? true : localStorage.fileExists(filePath: path)
            // Looked for only when an upload's file is missing (a path per record costs at 100,000 records).
            var stagingExists = false
            if !exists, record.state == .queuedUpload {
                stagingExists = try await localStorage.fileExists(filePath: savingPath(of: relative))
            }
            let timestamp = timestamps.next()
            switch StartupCheck.verdict(state: record.state, fileExists: exists, stagingExists: stagingExists) {
            case .removeFile:
                changedFiles = true
                try await localStorage.deleteFile(filePath: path)
                try await db.writeTransaction { tx in
                    try store.update(id: record.id, ifState: .queuedDelete, set: [("local_uri", nil)], in: tx)
                }
            case .keep, .completeSave:
                if !exists {
                    changedFiles = true
                    try await localStorage.moveFile(sourcePath: savingPath(of: relative), targetPath: path)
                    logger.info("completed an interrupted save", metadata: ["attachment": "\(record.id)"])
                }
                if relative != stored {
                    try await db.writeTransaction { tx in
                        try store.update(id: record.id, ifState: record.state, set: [("local_uri", relative)], in: tx)
                    }
                }
            case .downloadAgain:
                logger.warning(
                    "a synced file is missing; it will be downloaded again", metadata: ["attachment": "\(record.id)"])
                try await db.writeTransaction { tx in
                    try store.transition(
                        id: record.id, from: .synced, to: .queuedDownload, timestamp: timestamp,
                        set: [("local_uri", nil)], in: tx)
                }
            case .giveUpUpload:
                logger.error(
                    "a file waiting for upload is missing; its upload is given up and the attachment archived",
                    metadata: ["attachment": "\(record.id)"])
                try await db.writeTransaction { tx in
                    try store.transition(
                        id: record.id, from: .queuedUpload, to: .archived, timestamp: timestamp,
                        set: [
                            ("local_uri", nil), ("given_up", AttachmentState.queuedUpload.rawValue),
                            ("last_error", "the file to upload was missing at startup"),
                        ], in: tx)
                }
            case .release:
                try await db.writeTransaction { tx in
                    try store.update(id: record.id, ifState: record.state, set: [("local_uri", nil)], in: tx)
                }
            }
        }
        return (changedFiles ? nil : names, changedRecords ? nil : records)
    }

    /// Where `saveFile` staged the file `relative` before its commit.
    private func savingPath(of relative: String) -> String {
        localPath(FileName.savingName(for: relative))
    }

    /// `stored` relative to the attachments directory: as it is when already relative; for an absolute
    /// path, the part under the directory, else its last component.
    private func relativePath(_ stored: String) -> String {
        guard stored.hasPrefix("/") || stored.hasPrefix("file:") else { return stored }
        let url =
            stored.hasPrefix("file:")
            ? (URL(string: stored) ?? URL(fileURLWithPath: stored)) : URL(fileURLWithPath: stored)
        let base =
            attachmentsDirectory.path.hasSuffix("/") ? attachmentsDirectory.path : attachmentsDirectory.path + "/"
        let path = url.standardizedFileURL.path
        return path.hasPrefix(base) ? String(path.dropFirst(base.count)) : url.lastPathComponent
    }

    /// Removes what an interrupted call or a crash can leave in the attachments directory, and only that:
    /// - the library's temporary files (`.attachment-sync-…`), except partial downloads (and what the remote
    ///   needs to resume them) of attachments still waiting for their content;
    /// - the file of a save that never committed: `<name>` beside its staging twin `.attachment-sync-save-<name>`
    ///   (a second name of the same file, kept until the commit) when no record refers to `<name>`;
    /// - the local file of an attachment whose record claims none (its content evicted, purged, or downloaded
    ///   but not yet committed when the process stopped);
    /// - files named like attachments the queue generated (UUIDs) that no record refers to.
    ///
    /// Folders, and any other file, are left alone and logged once, so a queue pointed at the wrong folder
    /// deletes nothing of the user's.
    /// `unchanged` holds the folder's current listing and every record, when known (else they are read here).
    private func removeLeftoverFiles(_ unchanged: (listing: [String]?, records: [AttachmentRecord]?)) async throws {
        let store = store
        let known = unchanged.records
        let (referenced, resumable, unclaimed) = try await db.readTransaction { tx in
            let entries = try known ?? store.startupEntries(in: tx)
            let referenced = Set(entries.compactMap(\.localPath))
            let withoutContent = entries.filter { $0.localPath == nil }
            // Partial downloads of attachments still without content are kept, to resume.
            let resumable = Set(
                withoutContent.filter { $0.state == .queuedDownload || $0.state == .synced }.flatMap {
                    record -> [String] in
                    guard let partial = try? FileName.downloadingName(for: record.localName()) else { return [] }
                    // The remote adapter may keep what it needs to resume beside the partial file.
                    return [partial, FileName.resumeValidatorName(for: partial)]
                })
            let unclaimed = Set(withoutContent.compactMap { try? $0.localName() }).subtracting(referenced)
            return (referenced, resumable, unclaimed)
        }
        var names: [String]
        if let listing = unchanged.listing {
            names = listing
        } else {
            names = try await localStorage.listDirectory(path: attachmentsDirectory.path)
        }
        let plain = localStorage.plainFileURL(filePath: attachmentsDirectory.path) != nil
        let savingPrefix = FileName.savingName(for: "")
        for staging in names where staging.hasPrefix(savingPrefix) {
            let name = String(staging.dropFirst(savingPrefix.count))
            guard !referenced.contains(name), names.contains(name) else { continue }
            // With plain files, only when both names are one file (the twin was made with a hard link).
            if plain {
                guard let twin = files.info(atPath: localPath(staging)),
                    let placed = files.info(atPath: localPath(name)),
                    twin.identity == placed.identity
                else { continue }
            }
            try await localStorage.deleteFile(filePath: localPath(name))
            names.removeAll { $0 == name }
            logger.info("removed the file of a save that did not complete", metadata: ["file": "\(name)"])
        }
        let subdirectories = Set(configuration.subdirectories)
        var foreign: [String] = []
        for name in names {
            if referenced.contains(name) || resumable.contains(name) || subdirectories.contains(name) { continue }
            if plain, files.info(atPath: localPath(name))?.kind == .directory {
                foreign.append(name)
                continue
            }
            if name.hasPrefix(FileName.temporaryPrefix) || unclaimed.contains(name)
                || FileName.looksLikeGeneratedAttachment(name)
            {
                try await localStorage.deleteFile(filePath: localPath(name))
                logger.info("removed a leftover file", metadata: ["file": "\(name)"])
            } else {
                foreign.append(name)
            }
        }
        if !foreign.isEmpty {
            logger.notice(
                "the attachments directory holds files that are not attachments; they are left alone",
                metadata: ["files": "\(foreign.sorted().prefix(20).joined(separator: ", "))"])
        }
    }
}
