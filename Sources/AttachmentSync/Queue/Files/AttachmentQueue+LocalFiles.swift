import Foundation
import Logging

extension AttachmentQueue {
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
            try store.records(filename: filename, in: tx).first
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

    // MARK: - The queue's folders and their attributes
    /// What the files and folders the queue makes get: ``Configuration/fileProtection`` and
    /// ``Configuration/excludesDownloadsFromBackup``.
    nonisolated var localFilePolicy: LocalFilePolicy {
        LocalFilePolicy(
            protection: configuration.fileProtection,
            excludesDownloadsFromBackup: configuration.excludesDownloadsFromBackup)
    }

    /// Creates one of the queue's folders (the attachments directory, a subdirectory) with the local
    /// adapter and gives it the Data Protection class, whether it was just made or was there: what is
    /// created in it afterwards takes that class from it.
    func makeFolder(atPath path: String) async throws {
        try await localStorage.makeDir(path: path)
        try setAttributes(of: path, as: .folder)
    }

    /// Gives the file or folder at `path` what the policy says a `kind` gets. Only where the local adapter
    /// stores plain files: one that transforms content (``LocalStorageAdapter/plainFileURL(filePath:)`` is
    /// `nil`) keeps its files its own way.
    nonisolated func setAttributes(of path: String, as kind: LocalFilePolicy.Kind) throws {
        guard localStorage.plainFileURL(filePath: path) != nil else { return }
        try files.setAttributes(localFilePolicy.attributes(for: kind), atPath: path)
    }
}
