import Crypto
import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// Chunked file reading, copying and hashing, so a file of any size moves with a small, fixed amount of
/// memory. Between chunks the task yields, so a long copy never holds one of Swift's few cooperative
/// threads for long, and cancellation is checked.
enum FileStreaming {
    /// The chunk size: 1 MiB.
    static let chunkSize = 1 << 20

    /// The size and SHA-256 (lowercase hex) of a file, read in chunks.
    static func digest(of url: URL) async throws -> (size: Int64, sha256: String) {
        let handle = try fileSystem(path: url.path) { try FileHandle(forReadingFrom: url) }
        defer { try? handle.close() }
        var hasher = SHA256()
        var size: Int64 = 0
        while true {
            try Task.checkCancellation()
            let chunk = try fileSystem(path: url.path) { try handle.read(upToCount: chunkSize) } ?? Data()
            if chunk.isEmpty { break }
            hasher.update(data: chunk)
            size += Int64(chunk.count)
            await Task.yield()
        }
        return (size, hex(hasher.finalize()))
    }

    /// Copies `source` to `destination` (created or truncated) in chunks, flushing it to disk, and returns
    /// the size and SHA-256 of what was copied.
    static func copy(
        from source: URL,
        to destination: URL,
        progress: TransferProgressHandler? = nil
    ) async throws -> (size: Int64, sha256: String) {
        let (size, sha256) = try await copy(from: source, to: destination, hashing: true, progress: progress)
        return (size, sha256 ?? "")
    }

    /// Copies `source` to `destination` like ``copy(from:to:progress:)``, without hashing (a remote copy
    /// whose content the record already vouches for); returns the size.
    @discardableResult
    static func copyWithoutHashing(
        from source: URL, to destination: URL, progress: TransferProgressHandler? = nil
    ) async throws -> Int64 {
        try await copy(from: source, to: destination, hashing: false, progress: progress).size
    }

    private static func copy(
        from source: URL,
        to destination: URL,
        hashing: Bool,
        progress: TransferProgressHandler?
    ) async throws -> (size: Int64, sha256: String?) {
        let total = try? FileManager.default.attributesOfItem(atPath: source.path)[.size] as? NSNumber
        let input = try fileSystem(path: source.path) { try FileHandle(forReadingFrom: source) }
        defer { try? input.close() }
        try fileSystem(path: destination.path) {
            try FileManager.default.createDirectory(
                at: destination.deletingLastPathComponent(), withIntermediateDirectories: true)
        }
        let output = try openForWriting(destination)
        defer { try? output.close() }
        var hasher = SHA256()
        var size: Int64 = 0
        while true {
            try Task.checkCancellation()
            let chunk = try fileSystem(path: source.path) { try input.read(upToCount: chunkSize) } ?? Data()
            if chunk.isEmpty { break }
            try fileSystem(path: destination.path) { try output.write(contentsOf: chunk) }
            if hashing { hasher.update(data: chunk) }
            size += Int64(chunk.count)
            progress?(TransferProgress(completedBytes: size, totalBytes: total?.int64Value))
            await Task.yield()
        }
        try fileSystem(path: destination.path) { try output.synchronize() }
        return (size, hashing ? hex(hasher.finalize()) : nil)
    }

    /// Appends `source`'s bytes from `offset` on to the existing file `destination`, in chunks, flushing it
    /// to disk. Progress counts the whole of `source`, the first `offset` bytes included.
    static func append(
        from source: URL, offset: Int64, to destination: URL, progress: TransferProgressHandler? = nil
    ) async throws {
        let total = (try? FileManager.default.attributesOfItem(atPath: source.path)[.size] as? NSNumber)?.int64Value
        let input = try fileSystem(path: source.path) { try FileHandle(forReadingFrom: source) }
        defer { try? input.close() }
        let output = try fileSystem(path: destination.path) { try FileHandle(forWritingTo: destination) }
        defer { try? output.close() }
        var position = offset
        try fileSystem(path: destination.path) {
            try input.seek(toOffset: UInt64(max(offset, 0)))
            try output.seekToEnd()
        }
        progress?(TransferProgress(completedBytes: min(position, total ?? position), totalBytes: total))
        while true {
            try Task.checkCancellation()
            let chunk = try fileSystem(path: source.path) { try input.read(upToCount: chunkSize) } ?? Data()
            if chunk.isEmpty { break }
            try fileSystem(path: destination.path) { try output.write(contentsOf: chunk) }
            position += Int64(chunk.count)
            progress?(TransferProgress(completedBytes: position, totalBytes: total))
            await Task.yield()
        }
        try fileSystem(path: destination.path) { try output.synchronize() }
    }

    /// Creates (or truncates) the file at `url` for writing, with permissions 0644 less the umask.
    ///
    /// `open(2)` directly: `FileManager.createFile` writes an empty file atomically (a temporary file,
    /// flushed and renamed), which costs a rename and a flush per file for nothing.
    static func openForWriting(_ url: URL) throws -> FileHandle {
        let descriptor = open(url.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard descriptor >= 0 else {
            let code = errno
            throw AttachmentError(
                code: .fileSystem,
                message: "cannot create \(url.path): \(String(cString: strerror(code)))",
                path: url.path,
                underlying: POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
            )
        }
        return FileHandle(fileDescriptor: descriptor, closeOnDealloc: true)
    }

    /// Writes `data` to a new file at `url` and flushes it to disk (one `fsync`).
    static func writeDurably(_ data: Data, to url: URL) throws {
        let output = try openForWriting(url)
        defer { try? output.close() }
        try fileSystem(path: url.path) {
            try output.write(contentsOf: data)
            try output.synchronize()
        }
    }

    /// The SHA-256 (lowercase hex) of in-memory data.
    static func sha256(_ data: Data) -> String {
        hex(SHA256.hash(data: data))
    }

    private static func hex(_ digest: SHA256.Digest) -> String {
        digest.map { byte in
            let text = String(byte, radix: 16)
            return byte < 16 ? "0" + text : text
        }.joined()
    }
}
