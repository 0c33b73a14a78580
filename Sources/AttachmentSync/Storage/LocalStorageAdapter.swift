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
    func rmDir(path: String) async throws

    /// Copies a file, replacing the target.
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
}
