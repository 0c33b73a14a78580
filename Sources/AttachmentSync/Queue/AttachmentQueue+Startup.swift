import Foundation
import Logging

extension AttachmentQueue {
    /// Startup: checks the configuration and the table, creates the folders, then verifies every record
    /// against the files on disk and cleans up what a crash may have left.
    func initialize() async throws {
        try configuration.validate()
        try await checkTable()
        try await localStorage.makeDir(path: attachmentsDirectory.path)
        for subdirectory in configuration.subdirectories {
            try await localStorage.makeDir(path: localPath(subdirectory))
        }
        try await verifyRecordsAgainstFiles()
        try await removeLeftoverFiles()
    }

    /// Throws ``AttachmentError/Code-swift.struct/invalidConfiguration`` unless the attachments table exists
    /// with every column the queue uses.
    private func checkTable() async throws {
        let store = store
        let present = try await db.readTransaction { tx in try store.columnNames(in: tx) }
        let table = configuration.attachmentsQueueTableName
        guard !present.isEmpty else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "the database has no table \(String(reflecting: table)); add "
                    + "createAttachmentTable(name: \(String(reflecting: table))) to its Schema",
                name: table)
        }
        let missing = (["id"] + attachmentTableColumns.map(\.name)).filter { !present.contains($0) }
        guard missing.isEmpty else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "table \(String(reflecting: table)) lacks the attachment columns "
                    + missing.joined(separator: ", ") + "; declare it with createAttachmentTable(name:)",
                name: table)
        }
    }

    /// Makes every record's `local_uri` true:
    /// - an absolute path (older databases) becomes relative to the attachments directory;
    /// - a synced attachment whose file is missing is queued for download again;
    /// - an upload whose file is missing is completed from its staging file when `saveFile` was interrupted
    ///   after its commit, and archived otherwise (the only copy is lost);
    /// - an archived attachment whose file is missing just loses its `local_uri`;
    /// - a pending delete's file is removed.
    private func verifyRecordsAgainstFiles() async throws {
        let store = store
        let records = try await db.readTransaction { tx in try store.records(in: tx, where: "local_uri IS NOT NULL") }
        for record in records {
            guard let stored = record.localPath else { continue }
            let relative = relativePath(stored)
            let path = localPath(relative)
            var exists = try await localStorage.fileExists(filePath: path)
            if !exists, record.state == .queuedUpload {
                let staging = localPath(FileName.savingName(for: relative))
                if try await localStorage.fileExists(filePath: staging) {
                    try await localStorage.moveFile(sourcePath: staging, targetPath: path)
                    exists = true
                    logger.info("completed an interrupted save", metadata: ["attachment": "\(record.id)"])
                }
            }
            let timestamp = timestamps.next()
            switch (record.state, exists) {
            case (.queuedDelete, _):
                try await localStorage.deleteFile(filePath: path)
                try await db.writeTransaction { tx in
                    try store.update(id: record.id, ifState: .queuedDelete, set: [("local_uri", nil)], in: tx)
                }
            case (_, true):
                if relative != stored {
                    try await db.writeTransaction { tx in
                        try store.update(id: record.id, ifState: record.state, set: [("local_uri", relative)], in: tx)
                    }
                }
            case (.synced, false):
                logger.warning(
                    "a synced file is missing; it will be downloaded again", metadata: ["attachment": "\(record.id)"])
                try await db.writeTransaction { tx in
                    try store.transition(
                        id: record.id, from: .synced, to: .queuedDownload, timestamp: timestamp,
                        set: [("local_uri", nil)], in: tx)
                }
            case (.queuedUpload, false):
                logger.error(
                    "a file waiting for upload is missing; the attachment is archived",
                    metadata: ["attachment": "\(record.id)"])
                try await db.writeTransaction { tx in
                    try store.transition(
                        id: record.id, from: .queuedUpload, to: .archived, timestamp: timestamp,
                        set: [("local_uri", nil)], in: tx)
                }
            case (.archived, false), (.queuedDownload, false):
                try await db.writeTransaction { tx in
                    try store.update(id: record.id, ifState: record.state, set: [("local_uri", nil)], in: tx)
                }
            }
        }
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

    /// Removes the library's leftover temporary files, and files the queue generated (UUID-named) that no
    /// record refers to. Anything else in the directory is left alone and logged once.
    private func removeLeftoverFiles() async throws {
        let store = store
        let (referenced, resumable) = try await db.readTransaction { tx in
            let referenced = Set(try store.records(in: tx, where: "local_uri IS NOT NULL").compactMap(\.localPath))
            // Partial downloads of attachments still without content are kept, to resume.
            let resumable = Set(
                try store.records(in: tx, where: "local_uri IS NULL AND state IN (0, 3)").compactMap {
                    try? FileName.downloadingName(for: $0.localName())
                })
            return (referenced, resumable)
        }
        let subdirectories = Set(configuration.subdirectories)
        var foreign: [String] = []
        for name in try await localStorage.listDirectory(path: attachmentsDirectory.path) {
            if referenced.contains(name) || resumable.contains(name) || subdirectories.contains(name) { continue }
            if name.hasPrefix(FileName.temporaryPrefix) || FileName.looksLikeGeneratedAttachment(name) {
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
