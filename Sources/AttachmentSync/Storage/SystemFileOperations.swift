import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

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

    package static func error(_ code: Int32, _ what: String, _ path: String) -> AttachmentError {
        AttachmentError(
            code: code == ENOENT ? .localFileNotFound : .fileSystem,
            message: "\(what) \(path): \(String(cString: strerror(code)))",
            path: path,
            underlying: POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        )
    }
}

/// The C library's functions, named apart from methods of the same name.
func systemRename(_ source: String, _ target: String) -> Int32 { rename(source, target) }
func systemLink(_ source: String, _ target: String) -> Int32 { link(source, target) }
func systemClose(_ descriptor: Int32) -> Int32 { close(descriptor) }
func systemWrite(_ descriptor: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
    write(descriptor, buffer, count)
}

/// Reads from `descriptor` until `buffer` is full or the file ends (a read of 0 bytes), retrying reads
/// interrupted by a signal; returns how many bytes it read.
///
/// - Throws: `POSIXError` with the `errno` of a read that failed.
package func readFully(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer) throws -> Int {
    guard let base = buffer.baseAddress else { return 0 }
    var total = 0
    while total < buffer.count {
        let count = read(descriptor, base + total, buffer.count - total)
        if count < 0 {
            let code = errno
            if code == EINTR { continue }
            throw POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
        }
        if count == 0 { break }
        total += count
    }
    return total
}
