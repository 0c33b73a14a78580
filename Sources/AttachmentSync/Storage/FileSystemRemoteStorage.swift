import Foundation

/// Remote storage in a folder: each attachment is a file named after its ``Attachment/filename``.
///
/// It needs no server, so it is what the demo and the tests use, and it is handy for a shared network
/// volume or for syncing between two app instances on one machine. Writes are atomic (temporary file, then
/// rename), a missing file on download is ``AttachmentError/Code-swift.struct/remoteNotFound``, and deleting
/// a missing file succeeds.
///
/// ```swift
/// let remote = FileSystemRemoteStorage(directory: "/Volumes/Shared/attachments")
/// ```
public struct FileSystemRemoteStorage: RemoteStorageAdapter {
    /// The folder that holds the files.
    public let directory: URL
    private let local = FileManagerStorageAdapter()

    /// Uses `directory` (created on first upload) as the remote.
    public init(directory: String) {
        self.directory = URL(fileURLWithPath: directory, isDirectory: true)
    }

    /// Uses `directory` (created on first upload) as the remote.
    public init(directory: URL) {
        self.directory = directory
    }

    /// Writes the file atomically.
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        _ = try await local.saveFile(filePath: try path(for: attachment), data: data)
    }

    /// Reads the file; throws ``AttachmentError/Code-swift.struct/remoteNotFound`` when it does not exist.
    public func downloadFile(attachment: Attachment) async throws -> Data {
        let path = try path(for: attachment)
        guard FileManager.default.fileExists(atPath: path) else {
            throw AttachmentError(
                code: .remoteNotFound,
                message: "the remote folder has no file \(String(reflecting: attachment.filename))",
                attachmentId: attachment.id,
                name: attachment.filename,
                path: path
            )
        }
        return try await local.readFile(filePath: path, mediaType: attachment.mediaType)
    }

    /// Copies the file into the folder in chunks (bounded memory), atomically.
    public func uploadFile(
        fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler
    ) async throws {
        let target = try self.fileURL(for: attachment)
        let staging = directory.appendingPathComponent(FileName.uniqueTemporaryName())
        do {
            try await FileStreaming.copyWithoutHashing(from: fileURL, to: staging, progress: progress)
            try FileManagerStorageAdapter.rename(from: staging.path, to: target.path)
        } catch {
            try? FileManager.default.removeItem(at: staging)
            throw error
        }
    }

    /// Copies the file out of the folder in chunks (bounded memory); throws
    /// ``AttachmentError/Code-swift.struct/remoteNotFound`` when it does not exist.
    public func downloadFile(
        attachment: Attachment, to destination: URL, progress: @escaping TransferProgressHandler
    ) async throws {
        let source = try existingFile(for: attachment)
        try await FileStreaming.copyWithoutHashing(from: source, to: destination, progress: progress)
    }

    private func existingFile(for attachment: Attachment) throws -> URL {
        let source = try fileURL(for: attachment)
        guard FileManager.default.fileExists(atPath: source.path) else {
            throw AttachmentError(
                code: .remoteNotFound,
                message: "the remote folder has no file \(String(reflecting: attachment.filename))",
                attachmentId: attachment.id,
                name: attachment.filename,
                path: source.path
            )
        }
        return source
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
        try await FileStreaming.append(from: source, offset: offset, to: destination, progress: progress)
    }

    /// Deletes the file; succeeds when it does not exist.
    public func deleteFile(attachment: Attachment) async throws {
        try await local.deleteFile(filePath: try path(for: attachment))
    }

    /// Where the attachment's file is (or would be) in the remote folder.
    ///
    /// - Throws: ``AttachmentError/Code-swift.struct/invalidName`` when the attachment's filename is not a
    ///   single path component, so no file outside the folder is ever touched.
    public func fileURL(for attachment: Attachment) throws -> URL {
        try FileName.validate(attachment.filename, kind: "filename", attachmentId: attachment.id)
        return directory.appendingPathComponent(attachment.filename)
    }

    private func path(for attachment: Attachment) throws -> String {
        try fileURL(for: attachment).path
    }
}
