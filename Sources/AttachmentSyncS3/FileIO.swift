import AttachmentSync
import Crypto
import Foundation
import NIOCore

/// A byte range of a file, read in chunks as an asynchronous sequence of buffers: the body of a streamed
/// upload. Only one chunk is in memory at a time, and the HTTP client asks for the next only when it has
/// sent the previous one.
struct FileChunks: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    /// The chunk size: 256 KiB.
    static let chunkSize = 256 * 1024

    let url: URL
    let offset: Int64
    let length: Int64
    /// Called with the size of each chunk as it is handed to the client.
    let onChunk: @Sendable (Int) -> Void

    struct AsyncIterator: AsyncIteratorProtocol {
        let url: URL
        var position: Int64
        var remaining: Int64
        let onChunk: @Sendable (Int) -> Void
        var handle: FileHandle?

        mutating func next() async throws -> ByteBuffer? {
            guard remaining > 0 else {
                try? handle?.close()
                handle = nil
                return nil
            }
            try Task.checkCancellation()
            if handle == nil {
                let opened = try FileIO.openForReading(url)
                try FileIO.fileSystem(url) { try opened.seek(toOffset: UInt64(position)) }
                handle = opened
            }
            let count = Int(Swift.min(Int64(FileChunks.chunkSize), remaining))
            let data = try FileIO.fileSystem(url) { try handle?.read(upToCount: count) } ?? Data()
            guard !data.isEmpty else {
                throw AttachmentError(
                    code: .fileSystem,
                    message: "\(url.path) ended \(remaining) bytes early while it was being uploaded",
                    path: url.path)
            }
            position += Int64(data.count)
            remaining -= Int64(data.count)
            onChunk(data.count)
            return ByteBuffer(bytes: data)
        }
    }

    func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(url: url, position: offset, remaining: length, onChunk: onChunk, handle: nil)
    }
}

/// File helpers of the S3 module: opening, sizes, digests, and appending response bodies.
enum FileIO {
    /// Runs `body`, turning a thrown error into ``AttachmentError`` with code `.fileSystem` naming the file.
    static func fileSystem<T>(_ url: URL, _ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let error as AttachmentError {
            throw error
        } catch {
            throw AttachmentError(
                code: .fileSystem, message: "cannot access \(url.path): \(error.localizedDescription)", path: url.path,
                underlying: error)
        }
    }

    static func openForReading(_ url: URL) throws -> FileHandle {
        guard FileManager.default.fileExists(atPath: url.path) else {
            throw AttachmentError(
                code: .localFileNotFound, message: "there is no file at \(url.path)", path: url.path)
        }
        return try fileSystem(url) { try FileHandle(forReadingFrom: url) }
    }

    /// The size of the file at `url`.
    static func size(of url: URL) throws -> Int64 {
        guard FileManager.default.fileExists(atPath: url.path) else {
            throw AttachmentError(
                code: .localFileNotFound, message: "there is no file at \(url.path)", path: url.path)
        }
        let attributes = try fileSystem(url) { try FileManager.default.attributesOfItem(atPath: url.path) }
        return (attributes[.size] as? NSNumber)?.int64Value ?? 0
    }

    /// The file's modification time, in seconds since 1970, or 0 when unknown.
    static func modificationTime(of url: URL) -> Double {
        let attributes = try? FileManager.default.attributesOfItem(atPath: url.path)
        return (attributes?[.modificationDate] as? Date)?.timeIntervalSince1970 ?? 0
    }

    /// The MD5 (base64, for `Content-MD5`) and SHA-256 (hex, for the signed payload) of a byte range, read in
    /// chunks.
    static func digests(of url: URL, offset: Int64, length: Int64) async throws -> (md5: String, sha256: String) {
        var md5 = Insecure.MD5()
        var sha256 = SHA256()
        var iterator = FileChunks(url: url, offset: offset, length: length, onChunk: { _ in }).makeAsyncIterator()
        while let chunk = try await iterator.next() {
            chunk.withUnsafeReadableBytes { bytes in
                md5.update(bufferPointer: bytes)
                sha256.update(bufferPointer: bytes)
            }
            await Task.yield()
        }
        return (Data(md5.finalize()).base64EncodedString(), SigV4Signer.hex(sha256.finalize()))
    }

    /// The MD5 (base64) and SHA-256 (hex) of `data`.
    static func digests(of data: Data) -> (md5: String, sha256: String) {
        (Data(Insecure.MD5.hash(data: data)).base64EncodedString(), SigV4Signer.hex(SHA256.hash(data: data)))
    }

    /// Opens `url` for writing: created or truncated when `offset` is 0; otherwise it must hold at least
    /// `offset` bytes, is cut to exactly `offset` and positioned at its end.
    static func openForWriting(_ url: URL, at offset: Int64) throws -> FileHandle {
        try fileSystem(url) {
            try FileManager.default.createDirectory(
                at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
        }
        if offset == 0 {
            guard FileManager.default.createFile(atPath: url.path, contents: nil) else {
                throw AttachmentError(code: .fileSystem, message: "cannot create \(url.path)", path: url.path)
            }
            return try fileSystem(url) { try FileHandle(forWritingTo: url) }
        }
        let existing = (try? size(of: url)) ?? 0
        guard existing >= offset else {
            throw AttachmentError(
                code: .fileSystem,
                message: "cannot resume at byte \(offset): \(url.path) holds only \(existing) bytes",
                path: url.path)
        }
        let handle = try fileSystem(url) { try FileHandle(forWritingTo: url) }
        try fileSystem(url) {
            try handle.truncate(atOffset: UInt64(offset))
            try handle.seek(toOffset: UInt64(offset))
        }
        return handle
    }
}
