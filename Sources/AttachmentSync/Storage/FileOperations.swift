import Foundation

/// The file system calls the library makes on this device, behind one seam.
///
/// Every durable effect of the queue on local files (creating, writing, flushing, renaming, linking,
/// removing) goes through one of these methods, so the rules live in one place: writes are flushed with
/// ``SystemFileOperations/flush(descriptor:path:)`` (`F_FULLFSYNC` on Apple platforms), a rename or link is
/// followed by a flush of its folder, and a failed flush is an error. Tests substitute an implementation
/// that stops every effect at a chosen call, which is what a crash at that moment leaves on disk.
package protocol FileOperations: Sendable {
    /// What `path` names, without following a final symbolic link; `nil` when nothing is there.
    ///
    /// Only "no such file" (`ENOENT`) is `nil`. Any other failure to look (permission denied, an I/O error,
    /// protected data while a device is locked) throws ``AttachmentError/Code-swift.struct/fileSystem``:
    /// the file may well be there, and nothing may be concluded from not seeing it.
    func info(atPath path: String) throws -> FileInfo?
    /// What `path` names after following symbolic links; `nil` when nothing (or a dangling link) is there.
    /// Throws, as ``info(atPath:)`` does, for any failure other than "no such file".
    func infoFollowingLinks(atPath path: String) throws -> FileInfo?
    /// The names in a folder, hidden ones included.
    func contentsOfDirectory(atPath path: String) throws -> [String]
    /// Opens a file for reading (following symbolic links).
    func openForReading(atPath path: String) throws -> FileHandle
    /// Opens a file for writing: created or truncated when `offset` is `nil`; otherwise it must exist with at
    /// least `offset` bytes, is cut to `offset` and written from there.
    func openForWriting(atPath path: String, at offset: Int64?) throws -> any FileWriter
    /// `rename(2)`: atomic, replacing an existing target.
    func rename(_ source: String, to target: String) throws
    /// `link(2)`: a second name for the same file; fails when the target exists or the two are on different
    /// volumes (``AttachmentError/underlying`` is then a `POSIXError` with `EEXIST` or `EXDEV`).
    func link(_ source: String, to target: String) throws
    /// Removes a file (or a symbolic link, not what it points to). Succeeds when nothing is there.
    func removeFile(atPath path: String) throws
    /// Removes a folder and everything in it. Succeeds when nothing is there.
    func removeTree(atPath path: String) throws
    /// Creates a folder and its missing parents. Succeeds when it exists.
    func makeDirectory(atPath path: String) throws
    /// Sets a file's or folder's Data Protection class and backup exclusion (Apple platforms only). The
    /// default is ``LocalFileAttributes/apply(atPath:)``.
    func setAttributes(_ attributes: LocalFileAttributes, atPath path: String) throws
    /// Flushes a file's content to stable storage.
    func synchronizeFile(atPath path: String) throws
    /// Flushes a folder's entries (names created, renamed or removed in it) to stable storage.
    func synchronizeDirectory(atPath path: String) throws
    /// Flushes the content of several files, all on one volume, to stable storage. The default flushes
    /// each with ``synchronizeFile(atPath:)``.
    func synchronizeFiles(atPaths paths: [String]) throws
}

extension FileOperations {
    package func synchronizeFiles(atPaths paths: [String]) throws {
        for path in paths { try synchronizeFile(atPath: path) }
    }
}

/// A file open for writing.
package protocol FileWriter: AnyObject {
    /// Appends `data` at the current position.
    func write(_ data: Data) throws
    /// Appends `bytes` at the current position. The default copies them into a `Data` for
    /// ``write(_:)``.
    func write(contentsOf bytes: UnsafeRawBufferPointer) throws
    /// Flushes what was written to stable storage.
    func synchronize() throws
    /// Closes the file. Closing twice is harmless.
    func close()
}

extension FileWriter {
    package func write(contentsOf bytes: UnsafeRawBufferPointer) throws {
        try write(Data(bytes))
    }
}

/// What a path names.
package struct FileInfo: Sendable, Hashable {
    package enum Kind: Sendable, Hashable {
        case regular, directory, symbolicLink, other
    }

    package var kind: Kind
    package var size: Int64
    /// The volume and file number: two names with the same identity are one file (hard links).
    package var identity: FileIdentity
    /// The last modification, in seconds since 1970.
    package var modificationTime: Double = 0
}

/// A file's volume and number (`st_dev`, `st_ino`).
package struct FileIdentity: Sendable, Hashable {
    package var device: UInt64
    package var inode: UInt64
}
