import Crypto
import Foundation

/// Chunked file reading, copying and hashing, so a file of any size moves with a small, fixed amount of
/// memory. Between chunks the task yields, so a long copy never holds one of Swift's few cooperative
/// threads for long, and cancellation is checked.
package enum FileStreaming {
    /// The chunk size: 1 MiB.
    package static let chunkSize = 1 << 20

    /// The SHA-256 (lowercase hex) of in-memory data.
    package static func sha256(_ data: Data) -> String {
        hex(SHA256.hash(data: data))
    }

    /// Whether `text` is a SHA-256 in hex (64 hex digits, either case).
    package static func isSHA256(_ text: String) -> Bool {
        text.utf8.count == 64
            && text.utf8.allSatisfy { byte in
                (48...57).contains(byte) || (97...102).contains(byte) || (65...70).contains(byte)
            }
    }

    /// A digest in lowercase hex.
    package static func hex(_ digest: SHA256.Digest) -> String {
        var text = ""
        text.reserveCapacity(64)
        for byte in digest {
            let digits = String(byte, radix: 16)
            if byte < 16 { text += "0" }
            text += digits
        }
        return text
    }
}

extension FileOperations {
    /// The size of the regular file at `path` (following symbolic links).
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/localFileNotFound`` when
    ///   nothing is there.
    package func size(ofFileAt path: String) throws -> Int64 {
        guard let info = try infoFollowingLinks(atPath: path) else {
            throw AttachmentError(code: .localFileNotFound, message: "there is no file at \(path)", path: path)
        }
        return info.size
    }

    /// Reads `length` bytes of the file at `path` from `offset` on (to its end when `length` is `nil`), handing
    /// each chunk to `body`, with the task yielding between chunks. Returns the bytes read.
    ///
    /// - Throws: ``AttachmentError`` with code ``AttachmentError/Code-swift.struct/fileSystem`` when the file
    ///   ends before `length` bytes; `CancellationError`.
    @discardableResult
    package func readChunks(
        atPath path: String, offset: Int64 = 0, length: Int64? = nil, chunkSize: Int = FileStreaming.chunkSize,
        _ body: (Data) throws -> Void
    ) async throws -> Int64 {
        let handle = try openForReading(atPath: path)
        defer { try? handle.close() }
        if offset > 0 { try fileSystem(path: path) { try handle.seek(toOffset: UInt64(offset)) } }
        var read: Int64 = 0
        while length.map({ read < $0 }) ?? true {
            try Task.checkCancellation()
            let count = length.map { Int(min(Int64(chunkSize), $0 - read)) } ?? chunkSize
            let chunk = try fileSystem(path: path) { try handle.read(upToCount: count) } ?? Data()
            if chunk.isEmpty {
                guard let length else { break }
                throw AttachmentError(
                    code: .fileSystem, message: "\(path) ended \(length - read) bytes early", path: path)
            }
            try body(chunk)
            read += Int64(chunk.count)
            await Task.yield()
        }
        return read
    }

    /// The size and SHA-256 (lowercase hex) of a file, read in chunks.
    func digest(ofFileAt path: String) async throws -> (size: Int64, sha256: String) {
        var hasher = SHA256()
        let size = try await readChunks(atPath: path) { hasher.update(data: $0) }
        return (size, FileStreaming.hex(hasher.finalize()))
    }

    /// Copies the file at `source` (following symbolic links) to `destination` (created or truncated) in
    /// chunks, flushing it to disk, and returns the size and, when `hashing`, the SHA-256 of what was copied.
    /// Without `flushing`, the caller flushes the copy itself (several at once, say).
    @discardableResult
    func copy(
        from source: String, to destination: String, hashing: Bool = true, flushing: Bool = true,
        progress: TransferProgressHandler? = nil
    ) async throws -> (size: Int64, sha256: String?) {
        let total = try infoFollowingLinks(atPath: source)?.size
        let input = try openForReading(atPath: source)
        defer { try? input.close() }
        let output = try openForWriting(atPath: destination, at: nil)
        defer { output.close() }
        var hasher = SHA256()
        let size = try await pump(input, of: source, to: output, from: 0, total: total, progress: progress) {
            if hashing { hasher.update(data: $0) }
        }
        if flushing { try output.synchronize() }
        return (size, hashing ? FileStreaming.hex(hasher.finalize()) : nil)
    }

    /// Appends `source`'s bytes from `offset` on to the file `destination`, which holds at least `offset`
    /// bytes (anything past `offset` is cut), in chunks, flushing it to disk. Progress counts the whole of
    /// `source`, the first `offset` bytes included.
    func append(
        from source: String, offset: Int64, to destination: String, progress: TransferProgressHandler? = nil
    ) async throws {
        let total = try infoFollowingLinks(atPath: source)?.size
        let input = try openForReading(atPath: source)
        defer { try? input.close() }
        let start = max(offset, 0)
        let output = try openForWriting(atPath: destination, at: start)
        defer { output.close() }
        try fileSystem(path: source) { try input.seek(toOffset: UInt64(start)) }
        progress?(TransferProgress(completedBytes: min(start, total ?? start), totalBytes: total))
        try await pump(input, of: source, to: output, from: start, total: total, progress: progress)
        try output.synchronize()
    }

    /// Writes the rest of `input` (open on the file at `source`) to `output` in chunks, each let through by
    /// the task's bandwidth throttle and then handed to `body`, and reports progress as the position, from
    /// `position` on, grows. Returns the position after the last chunk.
    @discardableResult
    private func pump(
        _ input: FileHandle, of source: String, to output: any FileWriter, from position: Int64, total: Int64?,
        progress: TransferProgressHandler?, _ body: (Data) -> Void = { _ in }
    ) async throws -> Int64 {
        var position = position
        let throttle = BandwidthThrottle.current
        while true {
            try Task.checkCancellation()
            let chunk =
                try fileSystem(path: source) { try input.read(upToCount: FileStreaming.chunkSize) } ?? Data()
            if chunk.isEmpty { break }
            try await throttle?.take(chunk.count)
            try output.write(chunk)
            body(chunk)
            position += Int64(chunk.count)
            progress?(TransferProgress(completedBytes: position, totalBytes: total))
            await Task.yield()
        }
        return position
    }

    /// Writes `data` to a new file at `path` (created or truncated) and flushes it to disk.
    func writeDurably(_ data: Data, toPath path: String) throws {
        try write(data, toPath: path, flushing: true)
    }

    /// Writes `data` to a new file at `path` (created or truncated); without `flushing`, the caller flushes
    /// it.
    func write(_ data: Data, toPath path: String, flushing: Bool) throws {
        let output = try openForWriting(atPath: path, at: nil)
        defer { output.close() }
        try output.write(data)
        if flushing { try output.synchronize() }
    }

    /// Puts the finished file `source` in place as `target` (replacing it) and flushes the folder, so the
    /// new name survives a power loss.
    func moveDurably(_ source: String, to target: String) throws {
        try rename(source, to: target)
        try synchronizeDirectory(atPath: (target as NSString).deletingLastPathComponent)
    }
}

/// Runs a file system operation, wrapping its error in ``AttachmentError`` with the path.
package func fileSystem<T>(path: String, _ body: () throws -> T) throws -> T {
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
