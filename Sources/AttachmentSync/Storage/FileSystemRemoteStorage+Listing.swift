import Foundation

extension FileSystemRemoteStorage: ListableRemoteStorage {
    /// How many files one page of ``listFiles(after:)`` holds.
    static let listingPageSize = 1_000

    /// The folder's files in the order of their names, 1,000 a page; the stored hashes and temporary files
    /// beside them, subdirectories and anything but regular files are left out. A folder that does not exist
    /// (nothing was ever uploaded) lists no files.
    public func listFiles(after continuation: String?) async throws -> RemoteFileListing {
        guard try files.infoFollowingLinks(atPath: directory.path)?.kind == .directory else {
            if try files.info(atPath: directory.path) == nil { return RemoteFileListing(files: [], next: nil) }
            throw AttachmentError(
                code: .fileSystem, message: "the remote folder \(directory.path) is not a directory",
                path: directory.path)
        }
        let names = try files.contentsOfDirectory(atPath: directory.path)
            .filter { name in
                !name.hasPrefix(FileName.temporaryPrefix)
                    && continuation.map { $0.utf8.lexicographicallyPrecedes(name.utf8) } ?? true
            }
            .sorted { $0.utf8.lexicographicallyPrecedes($1.utf8) }
        var listed: [RemoteFile] = []
        var last: String?
        for name in names {
            guard listed.count < Self.listingPageSize else { return RemoteFileListing(files: listed, next: last) }
            last = name
            let path = directory.appendingPathComponent(name).path
            guard let info = try files.info(atPath: path), info.kind == .regular else { continue }
            listed.append(
                RemoteFile(
                    storedName: name, filename: FileName.unescapedSafeName(name, keepingDots: true), size: info.size,
                    lastModified: Date(timeIntervalSince1970: info.modificationTime)))
        }
        return RemoteFileListing(files: listed, next: nil)
    }

    /// The name of the file that holds `filename` in the folder (see ``fileURL(for:)``).
    public func storedName(forFilename filename: String) throws -> String {
        try FileName.validate(filename, kind: "filename")
        return FileName.safeName(filename, keepingDots: true)
    }

    /// Deletes the listed file and its stored SHA-256; succeeds when they do not exist.
    ///
    /// - Throws: ``AttachmentError/Code-swift.struct/invalidName`` for a stored name that is not one file
    ///   name in the folder (a path, or one of the adapter's own files).
    public func deleteListedFile(_ file: RemoteFile) async throws {
        let name = file.storedName
        guard !name.isEmpty, name != ".", name != "..", !name.contains("/"), !name.hasPrefix(FileName.temporaryPrefix)
        else {
            throw AttachmentError(
                code: .invalidName,
                message: "\(String(reflecting: name)) is not the name of a file the remote folder lists",
                name: name)
        }
        let target = directory.appendingPathComponent(name).path
        try files.removeFile(atPath: target)
        try files.removeFile(atPath: hashPath(forFileAt: target))
    }

    /// The adapter's files in the folder that no file needs: temporary files (`.attachment-sync-tmp-…`,
    /// left by an upload that was interrupted, or still being written) and stored hashes
    /// (`.attachment-sync-sha256-<name>`) whose file `<name>` is not there (deleted by other means, or an
    /// upload between writing the hash and linking the file), each with its size and last change.
    public func listLeftovers() async throws -> [RemoteFile] {
        guard try files.infoFollowingLinks(atPath: directory.path)?.kind == .directory else { return [] }
        var leftovers: [RemoteFile] = []
        for name in try files.contentsOfDirectory(atPath: directory.path) where isLeftover(name) {
            guard let info = try files.info(atPath: directory.appendingPathComponent(name).path), info.kind == .regular
            else { continue }
            leftovers.append(
                RemoteFile(
                    storedName: name, filename: nil, size: info.size,
                    lastModified: Date(timeIntervalSince1970: info.modificationTime)))
        }
        return leftovers.sorted { $0.storedName.utf8.lexicographicallyPrecedes($1.storedName.utf8) }
    }

    /// Deletes a temporary file, or a stored hash whose file is still not there; succeeds when it is gone.
    ///
    /// - Throws: ``AttachmentError/Code-swift.struct/invalidName`` for a name that is not one of the
    ///   adapter's files in the folder.
    public func deleteLeftover(_ file: RemoteFile) async throws {
        let name = file.storedName
        guard !name.contains("/"), name.hasPrefix(FileName.temporaryPrefix) else {
            throw AttachmentError(
                code: .invalidName,
                message: "\(String(reflecting: name)) is not a temporary file or stored hash of the remote folder",
                name: name)
        }
        // A hash whose file came back (uploaded again meanwhile) is that file's: kept.
        guard isLeftover(name) else { return }
        try files.removeFile(atPath: directory.appendingPathComponent(name).path)
    }

    /// Whether `name` is one of the adapter's files that no file needs: a temporary file, or a stored hash
    /// without its file.
    private func isLeftover(_ name: String) -> Bool {
        guard !name.contains("/"), name.hasPrefix(FileName.temporaryPrefix) else { return false }
        guard name.hasPrefix(Self.hashPrefix) else { return true }
        let target = String(name.dropFirst(Self.hashPrefix.count))
        if target.isEmpty { return true }
        // A file that cannot be looked at may be there: its hash is kept.
        do {
            return try files.info(atPath: directory.appendingPathComponent(target).path) == nil
        } catch {
            return false
        }
    }

    /// The SHA-256 stored beside the listed file (`.attachment-sync-sha256-<name>`, written before the file
    /// is put in place by every upload), when the name is one the folder gives an attachment's file (its
    /// filename escaped, or shortened when long) and the file is a regular file; otherwise `nil`.
    public func storedSHA256(of file: RemoteFile) async throws -> String? {
        let name = file.storedName
        guard Self.isAttachmentFileName(name) else { return nil }
        let path = directory.appendingPathComponent(name).path
        guard try files.info(atPath: path)?.kind == .regular else { return nil }
        return storedHash(of: path)
    }

    /// Whether `name` is one ``storedName(forFilename:)`` gives: an escaped filename, or a shortened one
    /// (80 bytes of escaped text, `~` and a SHA-256 in hex).
    static func isAttachmentFileName(_ name: String) -> Bool {
        guard !name.isEmpty, !name.contains("/"), !name.hasPrefix(FileName.temporaryPrefix) else { return false }
        if FileName.unescapedSafeName(name, keepingDots: true) != nil { return true }
        let parts = name.split(separator: "~", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].utf8.count == 80, FileStreaming.isSHA256(String(parts[1])),
            parts[1] == parts[1].lowercased()
        else { return false }
        let escaped = Set("abcdefghijklmnopqrstuvwxyz0123456789-_.^%")
        return parts[0].allSatisfy { escaped.contains($0) }
    }

    /// Whether the remote folder exists (empty or not).
    public func locationExists() async throws -> Bool {
        try files.infoFollowingLinks(atPath: directory.path)?.kind == .directory
    }

    /// The file's size and the SHA-256 stored beside it; `nil` when the folder has no such file.
    public func fileInfo(attachment: Attachment) async throws -> RemoteObjectInfo? {
        let path = try fileURL(for: attachment).path
        guard let info = try files.infoFollowingLinks(atPath: path), info.kind == .regular else { return nil }
        return RemoteObjectInfo(size: info.size, sha256: storedHash(of: path))
    }
}
