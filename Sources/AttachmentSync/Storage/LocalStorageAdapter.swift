import Foundation

/// The local side of attachment sync: how the queue reads and writes files on this device.
///
/// ``FileManagerStorageAdapter`` is the implementation for the device's file system; provide your own to
/// encrypt files at rest, say. Paths are absolute; the queue only passes paths inside its attachments
/// directory.
///
/// The contract the queue relies on:
/// - `saveFile` is atomic: after a crash the file is either absent (or as it was) or complete, never
///   partial. Write to a temporary file in the same folder, then rename it into place.
/// - `deleteFile` of a missing file succeeds.
/// - `moveFile` replaces the target atomically.
public protocol LocalStorageAdapter: Sendable {
    /// Writes `data` to `filePath` atomically, creating missing folders, and returns the bytes written.
    func saveFile(filePath: String, data: Data) async throws -> Int64

    /// Reads the whole file. Throws ``AttachmentError`` with code
    /// ``AttachmentError/Code-swift.struct/localFileNotFound`` when it does not exist.
    func readFile(filePath: String, mediaType: String?) async throws -> Data

    /// Deletes the file. Succeeds when it does not exist.
    func deleteFile(filePath: String) async throws

    /// Whether a file (or folder) exists at the path.
    func fileExists(filePath: String) async throws -> Bool

    /// The file's size in bytes, or `nil` when it does not exist.
    func fileSize(filePath: String) async throws -> Int64?

    /// Creates the folder and any missing parents. Succeeds when it exists.
    func makeDir(path: String) async throws

    /// Deletes the folder and everything in it. Succeeds when it does not exist.
    ///
    /// The queue never calls it. The default throws ``AttachmentError`` with code
    /// ``AttachmentError/Code-swift.struct/unsupported`` unless there is nothing at `path`.
    func rmDir(path: String) async throws

    /// Copies a file, replacing the target.
    ///
    /// The queue never calls it. The default reads the source with ``readFile(filePath:mediaType:)`` and
    /// writes it with ``saveFile(filePath:data:)``: the whole file in memory, so implement it for large files.
    func copyFile(sourcePath: String, targetPath: String) async throws

    /// Moves (renames) a file, replacing the target atomically.
    func moveFile(sourcePath: String, targetPath: String) async throws

    /// The names of the entries of a folder (files and folders, hidden ones included), or an empty list
    /// when it does not exist.
    func listDirectory(path: String) async throws -> [String]

    /// The URL of the file at `filePath` when its bytes are the attachment's content as is, so the queue
    /// may stream it to and from remote storage directly; `nil` when the adapter transforms what it
    /// stores (encryption at rest, say), and the queue then goes through ``readFile(filePath:mediaType:)``
    /// and ``saveFile(filePath:data:)``. The default is `nil`.
    func plainFileURL(filePath: String) -> URL?
}

extension LocalStorageAdapter {
    /// `nil`: content goes through ``readFile(filePath:mediaType:)`` and ``saveFile(filePath:data:)``.
    public func plainFileURL(filePath: String) -> URL? { nil }

    /// Succeeds when nothing is at `path`; otherwise throws
    /// ``AttachmentError/Code-swift.struct/unsupported``: removing folders is the adapter's to implement.
    public func rmDir(path: String) async throws {
        guard try await fileExists(filePath: path) else { return }
        throw AttachmentError(
            code: .unsupported, message: "\(type(of: self)) does not remove folders (\(path))", path: path)
    }

    /// Reads the source and saves it as the target (atomically, as ``saveFile(filePath:data:)`` does).
    public func copyFile(sourcePath: String, targetPath: String) async throws {
        let data = try await readFile(filePath: sourcePath, mediaType: nil)
        _ = try await saveFile(filePath: targetPath, data: data)
    }
}
