import Foundation

extension AttachmentQueue {
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
