/// Which Data Protection class and backup setting each kind of file or folder the queue makes gets, from
/// ``AttachmentQueue/Configuration/fileProtection`` and
/// ``AttachmentQueue/Configuration/excludesDownloadsFromBackup``. A pure decision: the queue applies it
/// (Apple platforms; nothing happens on Linux).
struct LocalFilePolicy: Sendable, Hashable {
    var protection: FileProtection
    var excludesDownloadsFromBackup: Bool

    /// What a file or folder is to the queue.
    enum Kind: Sendable, Hashable, CaseIterable {
        /// The attachments directory or one of its subdirectories: what is created in a folder takes its
        /// class, so adapters' files there (partial downloads, resume validators) get it too.
        case folder
        /// Content given to `saveFile` that the queue wrote itself (from data, or a copy of a file).
        case savedContent
        /// The caller's own file, taken over under a second name (a hard link) by `saveFile(fileURL:)`
        /// with `moveFile`: it may carry any class and a backup exclusion of its own.
        case adoptedFile
        /// A downloaded file, put in place by the queue once verified.
        case download
    }

    /// The attributes a file or folder of `kind` gets.
    ///
    /// Backups: only downloads are ever excluded, and only with the option on: their content is on remote
    /// storage, and after a restore startup finds them missing and downloads them again. Content saved on
    /// this device never is, not while it waits for upload (it is the only copy) and not after either: it is
    /// the user's own document (Apple's guidance keeps exclusion to caches and re-creatable support files),
    /// the backup is the copy that survives a remote that loses it, and a flag set when the upload ends would
    /// be one more write that a crash can skip. An adopted file has any exclusion it carried cleared, since
    /// the attribute moves with the file.
    func attributes(for kind: Kind) -> LocalFileAttributes {
        switch kind {
        case .folder, .savedContent: LocalFileAttributes(protection: protection)
        case .adoptedFile: LocalFileAttributes(protection: protection, excludedFromBackup: false)
        case .download:
            LocalFileAttributes(protection: protection, excludedFromBackup: excludesDownloadsFromBackup ? true : nil)
        }
    }
}
