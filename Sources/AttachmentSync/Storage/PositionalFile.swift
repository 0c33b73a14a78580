import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A file written (and read) at explicit offsets from several tasks at once: `pwrite(2)` and `pread(2)` on
/// one descriptor, which keep no shared position.
///
/// What a download writes out of order: the ranges of a parallel download, and the content of the segments
/// an encrypted download decrypts as they arrive. The core's file layer has no positional writes (a layer
/// writer opened at an offset cuts the file there).
package final class PositionalFile: Sendable {
    package let path: String
    private let descriptor: Int32

    /// Opens the file, created or truncated; for reading too when `readable` is `true`.
    package init(path: String, readable: Bool = false) throws {
        self.path = path
        let descriptor = open(path, (readable ? O_RDWR : O_WRONLY) | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            throw AttachmentError(
                code: .fileSystem, message: "cannot create \(path): \(String(cString: strerror(errno)))", path: path)
        }
        self.descriptor = descriptor
    }

    deinit { _ = close(descriptor) }

    /// Writes all of `bytes` at `offset`.
    package func write(_ bytes: Data, at offset: Int64) throws {
        try bytes.withUnsafeBytes { try write(contentsOf: $0, at: offset) }
    }

    /// Writes all of `buffer` at `offset`.
    package func write(contentsOf buffer: UnsafeRawBufferPointer, at offset: Int64) throws {
        guard var pointer = buffer.baseAddress else { return }
        var remaining = buffer.count
        var position = offset
        while remaining > 0 {
            let written = pwrite(descriptor, pointer, remaining, off_t(position))
            if written < 0 {
                let code = errno
                if code == EINTR { continue }
                throw error(code, "cannot write")
            }
            remaining -= written
            pointer += written
            position += Int64(written)
        }
    }

    /// Fills `buffer` from `offset`; throws when the file ends first.
    package func read(into buffer: UnsafeMutableRawBufferPointer, at offset: Int64) throws {
        guard var pointer = buffer.baseAddress else { return }
        var remaining = buffer.count
        var position = offset
        while remaining > 0 {
            let count = pread(descriptor, pointer, remaining, off_t(position))
            if count < 0 {
                let code = errno
                if code == EINTR { continue }
                throw error(code, "cannot read")
            }
            guard count > 0 else {
                throw AttachmentError(
                    code: .fileSystem, message: "\(path) ends before byte \(position + Int64(remaining))", path: path)
            }
            remaining -= count
            pointer += count
            position += Int64(count)
        }
    }

    /// Cuts (or extends, with a hole) the file to `length` bytes.
    package func truncate(to length: Int64) throws {
        guard ftruncate(descriptor, off_t(length)) == 0 else { throw error(errno, "cannot truncate") }
    }

    /// Flushes the file to stable storage (see ``SystemFileOperations/flush(descriptor:path:)``).
    package func synchronize() throws {
        try SystemFileOperations().flush(descriptor: descriptor, path: path)
    }

    /// Where the file's first data at or after `offset` is (see ``FileHoles/dataStart(_:from:)``).
    package func dataStart(from offset: Int64) -> Int64? {
        FileHoles.dataStart(descriptor, from: offset)
    }

    private func error(_ code: Int32, _ what: String) -> AttachmentError {
        AttachmentError(code: .fileSystem, message: "\(what) \(path): \(String(cString: strerror(code)))", path: path)
    }
}
