import Foundation

/// Local storage on the device's file system, with atomic, durable writes.
///
/// Every write goes to a temporary file in the target's folder, is flushed to disk, and is then renamed
/// over the target, after which the folder is flushed too; so once a call returns, the new file survives a
/// crash or a power loss, and a crash before leaves either the old file or none, never a partial one. On
/// Apple platforms flushing uses `F_FULLFSYNC`. This is the queue's default ``LocalStorageAdapter``.
public struct FileManagerStorageAdapter: LocalStorageAdapter {
    let files: any FileOperations

    /// Creates the adapter.
    public init() {
        self.files = SystemFileOperations()
    }

    init(files: any FileOperations) {
        self.files = files
    }

    /// Writes `data` to `filePath` atomically and durably, creating missing folders.
    public func saveFile(filePath: String, data: Data) async throws -> Int64 {
        let folder = (filePath as NSString).deletingLastPathComponent
        try files.makeDirectory(atPath: folder)
        let temporary = (folder as NSString).appendingPathComponent(FileName.uniqueTemporaryName())
        do {
            try files.writeDurably(data, toPath: temporary)
            try files.moveDurably(temporary, to: filePath)
        } catch {
            try? files.removeFile(atPath: temporary)
            throw error
        }
        return Int64(data.count)
    }

    /// Reads the whole file.
    public func readFile(filePath: String, mediaType: String?) async throws -> Data {
        guard try files.infoFollowingLinks(atPath: filePath) != nil else {
            throw AttachmentError(code: .localFileNotFound, message: "no file at \(filePath)", path: filePath)
        }
        return try fileSystem(path: filePath) { try Data(contentsOf: URL(fileURLWithPath: filePath)) }
    }

    /// Deletes the file; succeeds when it does not exist.
    public func deleteFile(filePath: String) async throws {
        try files.removeFile(atPath: filePath)
    }

    /// Whether a file or folder exists at the path.
    ///
    /// Only "no such file" is `false`: when the path cannot be looked at (no permission, an I/O error, the
    /// protected data of a locked device), this throws ``AttachmentError/Code-swift.struct/fileSystem``.
    public func fileExists(filePath: String) async throws -> Bool {
        try files.infoFollowingLinks(atPath: filePath) != nil
    }

    /// The file's size in bytes, or `nil` when it does not exist. Throws, as ``fileExists(filePath:)`` does,
    /// when the path cannot be looked at.
    public func fileSize(filePath: String) async throws -> Int64? {
        try files.infoFollowingLinks(atPath: filePath)?.size
    }

    /// Creates the folder and missing parents.
    public func makeDir(path: String) async throws {
        try files.makeDirectory(atPath: path)
    }

    /// Deletes the folder and its contents; succeeds when it does not exist.
    public func rmDir(path: String) async throws {
        try files.removeTree(atPath: path)
    }

    /// Copies a file, replacing the target atomically and durably.
    public func copyFile(sourcePath: String, targetPath: String) async throws {
        guard try files.infoFollowingLinks(atPath: sourcePath) != nil else {
            throw AttachmentError(code: .localFileNotFound, message: "no file at \(sourcePath)", path: sourcePath)
        }
        let folder = (targetPath as NSString).deletingLastPathComponent
        try files.makeDirectory(atPath: folder)
        let temporary = (folder as NSString).appendingPathComponent(FileName.uniqueTemporaryName())
        do {
            try await files.copy(from: sourcePath, to: temporary, hashing: false)
            try files.moveDurably(temporary, to: targetPath)
        } catch {
            try? files.removeFile(atPath: temporary)
            throw error
        }
    }

    /// Renames a file, replacing the target atomically, and flushes the target's folder.
    public func moveFile(sourcePath: String, targetPath: String) async throws {
        guard try files.info(atPath: sourcePath) != nil else {
            throw AttachmentError(code: .localFileNotFound, message: "no file at \(sourcePath)", path: sourcePath)
        }
        try files.moveDurably(sourcePath, to: targetPath)
    }

    /// The names of the folder's entries, or an empty list when it does not exist.
    public func listDirectory(path: String) async throws -> [String] {
        guard try files.infoFollowingLinks(atPath: path)?.kind == .directory else { return [] }
        return try files.contentsOfDirectory(atPath: path)
    }

    /// The file's URL: this adapter stores content as is.
    public func plainFileURL(filePath: String) -> URL? {
        URL(fileURLWithPath: filePath)
    }
}
