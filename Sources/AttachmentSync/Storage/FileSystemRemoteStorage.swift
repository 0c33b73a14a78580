import Foundation

/// Remote storage in a folder: each attachment is a file named after its ``Attachment/filename``.
///
/// It needs no server, so it is what the demo and the tests use, and it is handy for a shared network
/// volume or for syncing between two app instances on one machine.
///
/// - Writes are atomic and durable (a temporary file, flushed, linked into place, the folder flushed), and
///   create-only: a file is never replaced by other content (``AttachmentError/Code-swift.struct/conflict``).
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

    /// Creates the file atomically and durably, with its SHA-256 beside it; never replaces a file with
    /// other content (see ``uploadFile(fileURL:attachment:progress:)``).
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        let target = try path(for: attachment)
        try files.makeDirectory(atPath: directory.path)
        let staging = directory.appendingPathComponent(FileName.uniqueTemporaryName()).path
        try await BandwidthThrottle.current?.take(data.count)
        do {
            try files.writeDurably(data, toPath: staging)
            try await create(target, from: staging, sha256: FileStreaming.sha256(data), attachment: attachment)
        } catch {
            try? files.removeFile(atPath: staging)
            throw error
        }
    }

    /// Reads the file; throws ``AttachmentError/Code-swift.struct/remoteNotFound`` when it does not exist.
    public func downloadFile(attachment: Attachment) async throws -> Data {
        let source = try existingFile(for: attachment)
        let data = try fileSystem(path: source) { try Data(contentsOf: URL(fileURLWithPath: source)) }
        try await BandwidthThrottle.current?.take(data.count)
        return data
    }

    /// Copies the file into the folder in chunks (bounded memory), atomically and durably, with its SHA-256
    /// beside it.
    ///
    /// Create-only: a file already there under the name is never replaced by other content. When it holds
    /// the same bytes (an upload repeated after its answer was lost, another device's identical upload) the
    /// upload succeeds; other bytes throw ``AttachmentError/Code-swift.struct/conflict`` and both stay as
    /// they are. The new file is linked into place, so of two devices creating one name at once exactly
    /// one wins and the other sees the conflict.
    ///
    /// - Throws: ``AttachmentError/Code-swift.struct/integrityMismatch`` when the file is not the content
    ///   the attachment's ``Attachment/contentHash`` says (nothing is written);
    ///   ``AttachmentError/Code-swift.struct/conflict``.
    public func uploadFile(
        fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        let target = try path(for: attachment)
        try files.makeDirectory(atPath: directory.path)
        let staging = directory.appendingPathComponent(FileName.uniqueTemporaryName()).path
        do {
            let copied = try await files.copy(from: fileURL.path, to: staging, hashing: true, progress: progress)
            try await create(target, from: staging, sha256: copied.sha256 ?? "", attachment: attachment)
        } catch {
            try? files.removeFile(atPath: staging)
            throw error
        }
    }

    /// Puts the flushed file `staging` (whose SHA-256 is `sha256`) in place as `target` unless a file is
    /// there: then succeeds when it has the same bytes and throws `conflict` otherwise. `staging` is gone
    /// afterwards.
    private func create(_ target: String, from staging: String, sha256: String, attachment: Attachment) async throws {
        if let recorded = attachment.contentHash?.lowercased(), FileStreaming.isSHA256(recorded), recorded != sha256 {
            throw AttachmentError(
                code: .integrityMismatch,
                message: "the content to upload as \(String(reflecting: attachment.filename)) has SHA-256 \(sha256), "
                    + "but attachment \(String(reflecting: attachment.id)) was saved with \(recorded); nothing was "
                    + "uploaded", attachmentId: attachment.id, name: attachment.filename)
        }
        if try files.info(atPath: target) == nil {
            try storeHash(sha256, forFileAt: target)
            do {
                try files.link(staging, to: target)
                try files.synchronizeDirectory(atPath: directory.path)
                try files.removeFile(atPath: staging)
                return
            } catch {
                guard try files.info(atPath: target) != nil else { throw error }
            }
            // Another writer created the name first: compared below like any existing file.
        }
        try files.removeFile(atPath: staging)
        let existing = try await files.digest(ofFileAt: target)
        // The stored hash says what the file there holds (it may have been written for this upload).
        try storeHash(existing.sha256, forFileAt: target)
        guard existing.sha256 == sha256 else {
            throw AttachmentError(
                code: .conflict,
                message: "the remote folder holds other content as \(String(reflecting: attachment.filename)) "
                    + "(SHA-256 \(existing.sha256), not \(sha256)); nothing was replaced",
                attachmentId: attachment.id, name: attachment.filename, path: target)
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
    /// the SHA-256 stored beside it at upload; a copy from byte 0 also returns the SHA-256 of what it wrote,
    /// hashed on the way. `destination` is not flushed (the queue flushes the file before relying on it).
    public func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        let source = try existingFile(for: attachment)
        let info = RemoteObjectInfo(
            size: try files.infoFollowingLinks(atPath: source)?.size, sha256: storedHash(of: source))
        if offset > 0 {
            try await files.append(from: source, offset: offset, to: destination.path, progress: progress)
            return info
        }
        let written = try await files.copy(from: source, to: destination.path, flushing: false, progress: progress)
        return RemoteObjectInfo(
            size: info.size, sha256: info.sha256, writtenSize: written.size, writtenSHA256: written.sha256)
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
        guard try files.infoFollowingLinks(atPath: source) != nil else {
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

    /// Writes `sha256` beside the file `target` (before the file is put in place, so a file is never there
    /// without it), atomically and durably.
    private func storeHash(_ sha256: String, forFileAt target: String) throws {
        let hashFile = hashPath(forFileAt: target)
        let staging = directory.appendingPathComponent(FileName.uniqueTemporaryName()).path
        do {
            try files.writeDurably(Data(sha256.lowercased().utf8), toPath: staging)
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

extension FileSystemRemoteStorage: ReplaceableRemoteStorage {
    /// Replaces the file when its bytes still have SHA-256 `expectedSHA256` (the file's own bytes are hashed,
    /// not the stored hash beside it): the new file is copied in and flushed, its hash stored beside it, and
    /// it is renamed over the old one, so a reader opens either file whole. Interrupted after the hash was
    /// stored, the old file is still there, and a replace tried again (which reads it) goes ahead. A folder
    /// has no compare-and-swap: a delete of the file between the check and the rename is undone (the file
    /// comes back, referenced by no record, for `gc`).
    public func replaceFile(fileURL: URL, attachment: Attachment, replacing expectedSHA256: String) async throws {
        let target = try existingFile(for: attachment)
        let current = try await files.digest(ofFileAt: target)
        guard current.sha256 == expectedSHA256.lowercased() else {
            throw AttachmentError(
                code: .conflict,
                message: "the remote folder holds other content as \(String(reflecting: attachment.filename)) "
                    + "(SHA-256 \(current.sha256), not \(expectedSHA256)); nothing was replaced",
                attachmentId: attachment.id, name: attachment.filename, path: target)
        }
        let staging = directory.appendingPathComponent(FileName.uniqueTemporaryName()).path
        do {
            let copied = try await files.copy(from: fileURL.path, to: staging, hashing: true) { _ in }
            let sha256 = copied.sha256 ?? ""
            if let recorded = attachment.contentHash?.lowercased(), recorded != sha256 {
                throw AttachmentError(
                    code: .integrityMismatch,
                    message: "the replacement for \(String(reflecting: attachment.filename)) has SHA-256 \(sha256), "
                        + "not \(recorded); nothing was replaced", attachmentId: attachment.id,
                    name: attachment.filename)
            }
            try storeHash(sha256, forFileAt: target)
            try files.moveDurably(staging, to: target)
        } catch {
            try? files.removeFile(atPath: staging)
            throw error
        }
    }
}
