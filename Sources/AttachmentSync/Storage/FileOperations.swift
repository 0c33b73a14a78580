import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

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
    /// Flushes what was written to stable storage.
    func synchronize() throws
    /// Closes the file. Closing twice is harmless.
    func close()
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

/// ``FileOperations`` on the real file system, with POSIX calls.
package struct SystemFileOperations: FileOperations {
    /// The calls that flush files: this platform's, or a test's.
    let flushCalls: FlushCalls

    package init() {
        self.flushCalls = .system
    }

    /// File operations that flush with `flushCalls` (a test records or fails them).
    package init(flushCalls: FlushCalls) {
        self.flushCalls = flushCalls
    }

    package func info(atPath path: String) throws -> FileInfo? {
        var status = stat()
        guard lstat(path, &status) == 0 else { return try Self.absent(errno, path) }
        return Self.info(status)
    }

    package func infoFollowingLinks(atPath path: String) throws -> FileInfo? {
        var status = stat()
        guard stat(path, &status) == 0 else { return try Self.absent(errno, path) }
        return Self.info(status)
    }

    /// `nil` when a look at `path` failed with "no such file"; any other failure is thrown: a file that
    /// cannot be seen (no permission, an I/O error, a locked device) is not a file that is not there.
    private static func absent(_ code: Int32, _ path: String) throws -> FileInfo? {
        if code == ENOENT { return nil }
        throw error(code, "cannot look at", path)
    }

    private static func info(_ status: stat) -> FileInfo {
        let type = Int(status.st_mode) & Int(S_IFMT)
        let kind: FileInfo.Kind =
            switch type {
            case Int(S_IFREG): .regular
            case Int(S_IFDIR): .directory
            case Int(S_IFLNK): .symbolicLink
            default: .other
            }
        return FileInfo(
            kind: kind, size: Int64(status.st_size),
            identity: FileIdentity(
                device: UInt64(truncatingIfNeeded: status.st_dev), inode: UInt64(truncatingIfNeeded: status.st_ino)),
            modificationTime: status.modificationSeconds)
    }

    package func contentsOfDirectory(atPath path: String) throws -> [String] {
        try fileSystem(path: path) { try FileManager.default.contentsOfDirectory(atPath: path) }
    }

    package func openForReading(atPath path: String) throws -> FileHandle {
        guard try infoFollowingLinks(atPath: path) != nil else {
            throw AttachmentError(code: .localFileNotFound, message: "no file at \(path)", path: path)
        }
        return try fileSystem(path: path) { try FileHandle(forReadingFrom: URL(fileURLWithPath: path)) }
    }

    package func openForWriting(atPath path: String, at offset: Int64?) throws -> any FileWriter {
        guard let offset, offset > 0 else {
            let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            guard descriptor >= 0 else { throw Self.error(errno, "cannot create", path) }
            return DescriptorWriter(descriptor: descriptor, path: path, files: self)
        }
        let descriptor = open(path, O_WRONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw Self.error(errno, "cannot open", path) }
        let writer = DescriptorWriter(descriptor: descriptor, path: path, files: self)
        var status = stat()
        guard fstat(descriptor, &status) == 0 else {
            writer.close()
            throw Self.error(errno, "cannot read the size of", path)
        }
        guard Int64(status.st_size) >= offset else {
            writer.close()
            throw AttachmentError(
                code: .fileSystem,
                message: "cannot continue \(path) at byte \(offset): it holds only \(status.st_size) bytes",
                path: path)
        }
        guard ftruncate(descriptor, off_t(offset)) == 0, lseek(descriptor, off_t(offset), SEEK_SET) >= 0 else {
            writer.close()
            throw Self.error(errno, "cannot position", path)
        }
        return writer
    }

    package func rename(_ source: String, to target: String) throws {
        guard systemRename(source, target) == 0 else {
            throw Self.error(errno, "cannot move \(source) to", target)
        }
    }

    package func link(_ source: String, to target: String) throws {
        guard systemLink(source, target) == 0 else {
            throw Self.error(errno, "cannot link \(source) as", target)
        }
    }

    package func removeFile(atPath path: String) throws {
        guard unlink(path) == 0 else {
            let code = errno
            if code == ENOENT { return }
            throw Self.error(code, "cannot remove", path)
        }
    }

    package func removeTree(atPath path: String) throws {
        guard try info(atPath: path) != nil else { return }
        try fileSystem(path: path) { try FileManager.default.removeItem(atPath: path) }
    }

    package func makeDirectory(atPath path: String) throws {
        if try infoFollowingLinks(atPath: path)?.kind == .directory { return }
        try fileSystem(path: path) {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        }
    }

    package func synchronizeFile(atPath path: String) throws {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw Self.error(errno, "cannot open to flush", path) }
        defer { _ = systemClose(descriptor) }
        try flush(descriptor: descriptor, path: path)
    }

    /// More than one file is flushed with one flush that reaches stable storage, where the platform allows:
    ///
    /// - Apple platforms: each file is `fsync`ed (which only moves its data to the drive) and the last one
    ///   is flushed with `F_FULLFSYNC`, which drains the drive's whole cache: "data that had been fsync'd on
    ///   the same device before is guaranteed to be persisted when this call returns" (fcntl(2) on macOS).
    ///   So the batch costs one drain of the drive instead of one per file, and every file is on stable
    ///   storage when this returns, as the contract says. `F_BARRIERFSYNC` would be cheaper still, but it
    ///   only orders writes ("no assumption should be made on what has been persisted or not when this call
    ///   returns", same page): enough to keep a file ahead of the record that names it on the same drive,
    ///   not for `saveFiles`' promise that every file is on stable storage when it returns (a power loss
    ///   right after would lose photos the app was told are saved). SQLite's `fullfsync` likewise asks for
    ///   `F_FULLFSYNC` (and falls back to `fsync` where it fails), as done here: where the drive cannot be
    ///   drained, the last file is `fsync`ed like the others.
    /// - Linux (`syncfs(2)`): one flush of their volume: the kernel writes them out together and the journal
    ///   commits once, where a flush per file commits once per file (on ext4 here, 2,000 files of 64 KiB:
    ///   one `syncfs` took a fifth of the time of 2,000 `fsync`s). Since Linux 5.8 it reports write-back
    ///   errors as `fsync` does. Where `syncfs` fails as unsupported, each file is flushed.
    package func synchronizeFiles(atPaths paths: [String]) throws {
        if paths.count > 1, flushCalls.drainDrive != nil, let last = paths.last {
            for path in paths.dropLast() {
                let descriptor = open(path, O_RDONLY | O_CLOEXEC)
                guard descriptor >= 0 else { throw Self.error(errno, "cannot open to flush", path) }
                defer { _ = systemClose(descriptor) }
                try push(descriptor: descriptor, path: path)
            }
            try synchronizeFile(atPath: last)
            return
        }
        if paths.count > 1, let syncVolume = flushCalls.syncVolume {
            let descriptor = open(paths[0], O_RDONLY | O_CLOEXEC)
            guard descriptor >= 0 else { throw Self.error(errno, "cannot open to flush", paths[0]) }
            defer { _ = systemClose(descriptor) }
            if syncVolume(descriptor) == 0 { return }
            let code = errno
            if code != ENOSYS && code != EINVAL { throw Self.error(code, "cannot flush the volume of", paths[0]) }
        }
        for path in paths { try synchronizeFile(atPath: path) }
    }

    /// Drains the drive that holds `path` (``FlushCalls/drainDrive``, `F_FULLFSYNC` on Apple platforms): what
    /// was `fsync`ed to that drive before, a commit SQLite flushed say, is then on stable storage. Does
    /// nothing where the platform has no such call (Linux, whose `fsync` already waited for the device).
    /// Best effort, for after a commit SQLite has flushed itself: a file that cannot be opened or a volume
    /// that cannot be drained is left at that.
    package func drainDrive(holding path: String) {
        guard let drainDrive = flushCalls.drainDrive else { return }
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { return }
        _ = drainDrive(descriptor)
        _ = systemClose(descriptor)
    }

    package func synchronizeDirectory(atPath path: String) throws {
        let descriptor = open(path, O_RDONLY | O_CLOEXEC)
        guard descriptor >= 0 else { throw Self.error(errno, "cannot open the folder to flush", path) }
        defer { _ = systemClose(descriptor) }
        try flush(descriptor: descriptor, path: path)
    }

    /// Flushes an open file or folder to stable storage; a failure is an error (the data may not be on disk).
    ///
    /// On Apple platforms `fsync` only hands the data to the drive, which may keep it in a volatile cache;
    /// `F_FULLFSYNC` (``FlushCalls/drainDrive``) asks the drive to write it out, as SQLite does with `PRAGMA
    /// fullfsync`. Where the file system does not support it (some network volumes), plain `fsync` is used.
    func flush(descriptor: Int32, path: String) throws {
        if let drainDrive = flushCalls.drainDrive, drainDrive(descriptor) == 0 { return }
        try push(descriptor: descriptor, path: path)
    }

    /// `fsync`s an open file or folder: on Linux that reaches stable storage, on Apple platforms the drive
    /// (see ``flush(descriptor:path:)``). A failure is an error.
    private func push(descriptor: Int32, path: String) throws {
        guard flushCalls.fsync(descriptor) == 0 else {
            let code = errno
            // Some file systems cannot flush a folder; that is no reason to fail.
            if code == EINVAL || code == ENOTSUP { return }
            throw Self.error(code, "cannot flush", path)
        }
    }

    package static func error(_ code: Int32, _ what: String, _ path: String) -> AttachmentError {
        AttachmentError(
            code: code == ENOENT ? .localFileNotFound : .fileSystem,
            message: "\(what) \(path): \(String(cString: strerror(code)))",
            path: path,
            underlying: POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        )
    }
}

/// A file descriptor open for writing.
final class DescriptorWriter: FileWriter {
    private var descriptor: Int32
    private let path: String
    /// What flushes it.
    private let files: SystemFileOperations

    init(descriptor: Int32, path: String, files: SystemFileOperations) {
        self.descriptor = descriptor
        self.path = path
        self.files = files
    }

    deinit { close() }

    func write(_ data: Data) throws {
        try data.withUnsafeBytes { (buffer: UnsafeRawBufferPointer) in
            guard var pointer = buffer.baseAddress else { return }
            var remaining = buffer.count
            while remaining > 0 {
                let written = systemWrite(descriptor, pointer, remaining)
                if written < 0 {
                    let code = errno
                    if code == EINTR { continue }
                    throw SystemFileOperations.error(code, "cannot write", path)
                }
                remaining -= written
                pointer += written
            }
        }
    }

    func synchronize() throws {
        try files.flush(descriptor: descriptor, path: path)
    }

    func close() {
        guard descriptor >= 0 else { return }
        _ = systemClose(descriptor)
        descriptor = -1
    }
}

/// The C library's functions, named apart from methods of the same name.
private func systemRename(_ source: String, _ target: String) -> Int32 { rename(source, target) }
private func systemLink(_ source: String, _ target: String) -> Int32 { link(source, target) }
private func systemClose(_ descriptor: Int32) -> Int32 { close(descriptor) }
private func systemWrite(_ descriptor: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    write(descriptor, buffer, count)
}
