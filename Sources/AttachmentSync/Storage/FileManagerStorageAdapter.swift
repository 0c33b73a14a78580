import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Local storage on the device's file system, with atomic, durable writes.
///
/// Every write goes to a temporary file in the target's folder, is flushed to disk (`fsync`), and is then
/// renamed over the target, so a crash leaves either the old file or the complete new one. This is the
/// queue's default ``LocalStorageAdapter``.
public struct FileManagerStorageAdapter: LocalStorageAdapter {
    /// Creates the adapter.
    public init() {}

    /// Writes `data` to `filePath` atomically and durably, creating missing folders.
    public func saveFile(filePath: String, data: Data) async throws -> Int64 {
        let target = URL(fileURLWithPath: filePath)
        let folder = target.deletingLastPathComponent()
        try fileSystem(path: folder.path) {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        let temporary = folder.appendingPathComponent(FileName.uniqueTemporaryName())
        do {
            try FileStreaming.writeDurably(data, to: temporary)
            try Self.rename(from: temporary.path, to: target.path)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
        return Int64(data.count)
    }

    /// Reads the whole file.
    public func readFile(filePath: String, mediaType: String?) async throws -> Data {
        guard FileManager.default.fileExists(atPath: filePath) else {
            throw AttachmentError(code: .localFileNotFound, message: "no file at \(filePath)", path: filePath)
        }
        return try fileSystem(path: filePath) { try Data(contentsOf: URL(fileURLWithPath: filePath)) }
    }

    /// Deletes the file; succeeds when it does not exist.
    public func deleteFile(filePath: String) async throws {
        guard FileManager.default.fileExists(atPath: filePath) else { return }
        try fileSystem(path: filePath) { try FileManager.default.removeItem(atPath: filePath) }
    }

    /// Whether a file or folder exists at the path.
    public func fileExists(filePath: String) async throws -> Bool {
        FileManager.default.fileExists(atPath: filePath)
    }

    /// The file's size in bytes, or `nil` when it does not exist.
    public func fileSize(filePath: String) async throws -> Int64? {
        guard FileManager.default.fileExists(atPath: filePath) else { return nil }
        let attributes = try fileSystem(path: filePath) { try FileManager.default.attributesOfItem(atPath: filePath) }
        return (attributes[.size] as? NSNumber)?.int64Value
    }

    /// Creates the folder and missing parents.
    public func makeDir(path: String) async throws {
        try fileSystem(path: path) {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
    }

    /// Deletes the folder and its contents; succeeds when it does not exist.
    public func rmDir(path: String) async throws {
        guard FileManager.default.fileExists(atPath: path) else { return }
        try fileSystem(path: path) { try FileManager.default.removeItem(atPath: path) }
    }

    /// Copies a file, replacing the target atomically.
    public func copyFile(sourcePath: String, targetPath: String) async throws {
        guard FileManager.default.fileExists(atPath: sourcePath) else {
            throw AttachmentError(code: .localFileNotFound, message: "no file at \(sourcePath)", path: sourcePath)
        }
        let folder = URL(fileURLWithPath: targetPath).deletingLastPathComponent()
        let temporary = folder.appendingPathComponent(FileName.uniqueTemporaryName())
        do {
            try fileSystem(path: targetPath) {
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
                try FileManager.default.copyItem(atPath: sourcePath, toPath: temporary.path)
            }
            try Self.synchronize(path: temporary.path)
            try Self.rename(from: temporary.path, to: targetPath)
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw error
        }
    }

    /// Renames a file, replacing the target atomically.
    public func moveFile(sourcePath: String, targetPath: String) async throws {
        guard FileManager.default.fileExists(atPath: sourcePath) else {
            throw AttachmentError(code: .localFileNotFound, message: "no file at \(sourcePath)", path: sourcePath)
        }
        try Self.rename(from: sourcePath, to: targetPath)
    }

    /// The names of the folder's entries, or an empty list when it does not exist.
    public func listDirectory(path: String) async throws -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory), isDirectory.boolValue else {
            return []
        }
        return try fileSystem(path: path) { try FileManager.default.contentsOfDirectory(atPath: path) }
    }

    /// The file's URL: this adapter stores content as is.
    public func plainFileURL(filePath: String) -> URL? {
        URL(fileURLWithPath: filePath)
    }

    // MARK: - POSIX helpers

    /// `rename(2)`: atomic, and replaces an existing target (FileManager's move refuses to).
    static func rename(from source: String, to target: String) throws {
        guard systemRename(source, target) == 0 else {
            let code = errno
            throw AttachmentError(
                code: .fileSystem,
                message: "cannot move \(source) to \(target): \(String(cString: strerror(code)))",
                path: target,
                underlying: POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
            )
        }
    }

    /// Flushes a file's contents to stable storage.
    static func synchronize(path: String) throws {
        let descriptor = open(path, O_RDONLY)
        guard descriptor >= 0 else {
            let code = errno
            throw AttachmentError(
                code: .fileSystem,
                message: "cannot open \(path) to flush it: \(String(cString: strerror(code)))",
                path: path
            )
        }
        defer { close(descriptor) }
        _ = fsync(descriptor)
    }
}

/// The C library's `rename`, named apart from the adapter's own method.
private func systemRename(_ source: String, _ target: String) -> Int32 {
    rename(source, target)
}

/// Runs a file system operation, wrapping its error in ``AttachmentError`` with the path.
func fileSystem<T>(path: String, _ body: () throws -> T) throws -> T {
    do {
        return try body()
    } catch let error as AttachmentError {
        throw error
    } catch {
        throw AttachmentError(
            code: .fileSystem,
            message: "file system operation on \(path) failed: \(error.localizedDescription)",
            path: path,
            underlying: error
        )
    }
}
