import Foundation

/// Remote storage in a folder: each attachment is a file named after its ``Attachment/filename``.
///
/// It needs no server, so it is what the demo and the tests use, and it is handy for a shared network
/// volume or for syncing between two app instances on one machine.
///
/// - Writes are atomic and durable (a temporary file, flushed, renamed into place, the folder flushed).
/// - Each file's SHA-256 (``Attachment/contentHash``) is kept beside it in a small file named
///   `.attachment-sync-sha256-<name>`, and returned with every download, so the queue verifies bytes that
///   another device uploaded.
/// - A filename made only of lowercase ASCII letters, digits, `.`, `-` and `_` is used as it is; any other
///   is escaped (``fileURL(for:)``), so two filenames never share a file even on a volume that ignores case
///   or Unicode normalisation (APFS and HFS+ do).
/// - A missing file on download is ``AttachmentError/Code-swift.struct/remoteNotFound``; deleting a missing
///   file succeeds.
///
/// ```swift
/// let remote = FileSystemRemoteStorage(directory: "/Volumes/Shared/attachments")
/// ```
public struct FileSystemRemoteStorage: RemoteStorageAdapter {
    /// The folder that holds the files.
    public let directory: URL
    let files = SystemFileOperations()

    /// The prefix of the files that hold each file's SHA-256.
    static let hashPrefix = "\(FileName.temporaryPrefix)sha256-"

    /// Uses `directory` (created on first upload) as the remote.
    public init(directory: String) {
        self.directory = URL(fileURLWithPath: directory, isDirectory: true)
    }

    /// Uses `directory` (created on first upload) as the remote.
    public init(directory: URL) {
        self.directory = directory
    }

    /// Writes the file atomically and durably, with its SHA-256 beside it.
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        let target = try path(for: attachment)
        try files.makeDirectory(atPath: directory.path)
        let staging = directory.appendingPathComponent(FileName.uniqueTemporaryName()).path
        do {
            try files.writeDurably(data, toPath: staging)
            try storeHash(of: attachment, forFileAt: target)
            try files.moveDurably(staging, to: target)
        } catch {
            try? files.removeFile(atPath: staging)
            throw error
        }
    }

    /// Reads the file; throws ``AttachmentError/Code-swift.struct/remoteNotFound`` when it does not exist.
    public func downloadFile(attachment: Attachment) async throws -> Data {
        let source = try existingFile(for: attachment)
        return try fileSystem(path: source) { try Data(contentsOf: URL(fileURLWithPath: source)) }
    }

    /// Copies the file into the folder in chunks (bounded memory), atomically and durably, with its SHA-256
    /// beside it.
    public func uploadFile(
        fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        let target = try path(for: attachment)
        try files.makeDirectory(atPath: directory.path)
        let staging = directory.appendingPathComponent(FileName.uniqueTemporaryName()).path
        do {
            try await files.copy(from: fileURL.path, to: staging, hashing: false, progress: progress)
            try storeHash(of: attachment, forFileAt: target)
            try files.moveDurably(staging, to: target)
        } catch {
            try? files.removeFile(atPath: staging)
            throw error
        }
    }

    /// Copies the file out of the folder in chunks (bounded memory); throws
    /// ``AttachmentError/Code-swift.struct/remoteNotFound`` when it does not exist.
    public func downloadFile(
        attachment: Attachment, to destination: URL, progress: @escaping TransferProgressHandler
    ) async throws {
        let source = try existingFile(for: attachment)
        try await files.copy(from: source, to: destination.path, hashing: false, progress: progress)
    }

    /// `true`: a download can resume from an offset.
    public var supportsRangedDownloads: Bool { true }

    /// Appends the file's bytes from `offset` on to `destination`, in chunks; throws
    /// ``AttachmentError/Code-swift.struct/remoteNotFound`` when it does not exist.
    public func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        let source = try existingFile(for: attachment)
        try await files.append(from: source, offset: offset, to: destination.path, progress: progress)
    }

    /// Copies the file (from `offset` on, appended to what `destination` holds) and returns its size and
    /// the SHA-256 stored beside it at upload.
    public func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        let source = try existingFile(for: attachment)
        if offset > 0 {
            try await files.append(from: source, offset: offset, to: destination.path, progress: progress)
        } else {
            try await files.copy(from: source, to: destination.path, hashing: false, progress: progress)
        }
        return RemoteObjectInfo(size: files.infoFollowingLinks(atPath: source)?.size, sha256: storedHash(of: source))
    }

    /// Deletes the file and its stored SHA-256; succeeds when they do not exist.
    public func deleteFile(attachment: Attachment) async throws {
        let target = try path(for: attachment)
        try files.removeFile(atPath: target)
        try files.removeFile(atPath: hashPath(forFileAt: target))
    }

    /// Where the attachment's file is (or would be) in the remote folder: the folder and the filename, made
    /// safe for any file system: lowercase ASCII letters, digits, `.`, `-` and `_` stay; an uppercase letter
    /// becomes `^` and the letter in lowercase, and any other byte `%` and two hex digits (`Photo é.JPG` is
    /// `^photo%20%c3%a9.^j^p^g`).
    ///
    /// - Throws: ``AttachmentError/Code-swift.struct/invalidName`` when the attachment's filename is not a
    ///   single path component, so no file outside the folder is ever touched.
    public func fileURL(for attachment: Attachment) throws -> URL {
        try FileName.validate(attachment.filename, kind: "filename", attachmentId: attachment.id)
        return directory.appendingPathComponent(FileName.safeName(attachment.filename, keepingDots: true))
    }

    private func path(for attachment: Attachment) throws -> String {
        try fileURL(for: attachment).path
    }

    private func existingFile(for attachment: Attachment) throws -> String {
        let source = try path(for: attachment)
        guard files.infoFollowingLinks(atPath: source) != nil else {
            throw AttachmentError(
                code: .remoteNotFound,
                message: "the remote folder has no file \(String(reflecting: attachment.filename))",
                attachmentId: attachment.id,
                name: attachment.filename,
                path: source
            )
        }
        return source
    }

    func hashPath(forFileAt path: String) -> String {
        let url = URL(fileURLWithPath: path)
        return url.deletingLastPathComponent().appendingPathComponent(Self.hashPrefix + url.lastPathComponent).path
    }

    /// Writes the attachment's SHA-256 beside its file (before the file is put in place), or removes a stale
    /// one when the hash is unknown.
    private func storeHash(of attachment: Attachment, forFileAt target: String) throws {
        let hashFile = hashPath(forFileAt: target)
        guard let hash = attachment.contentHash, FileStreaming.isSHA256(hash) else {
            try files.removeFile(atPath: hashFile)
            return
        }
        let staging = directory.appendingPathComponent(FileName.uniqueTemporaryName()).path
        do {
            try files.writeDurably(Data(hash.lowercased().utf8), toPath: staging)
            try files.moveDurably(staging, to: hashFile)
        } catch {
            try? files.removeFile(atPath: staging)
            throw error
        }
    }

    func storedHash(of source: String) -> String? {
        guard let data = FileManager.default.contents(atPath: hashPath(forFileAt: source)), data.count <= 128,
            let text = String(data: data, encoding: .utf8)?.trimmingCharacters(in: .whitespacesAndNewlines),
            FileStreaming.isSHA256(text)
        else { return nil }
        return text.lowercased()
    }
}
