import AttachmentSync
import Crypto
import Foundation

/// A byte range of a file, read in chunks as an asynchronous sequence: the body of a streamed upload. Only
/// one chunk is in memory at a time, and the HTTP client asks for the next only when it has sent the
/// previous one.
package struct FileChunks: AsyncSequence, Sendable {
    package typealias Element = Data

    /// The chunk size: 256 KiB.
    package static let chunkSize = 256 * 1024

    let url: URL
    let offset: Int64
    let length: Int64
    /// The file layer the file is read through.
    let files: any FileOperations
    /// Called with the size of each chunk as it is handed to the client.
    let onChunk: @Sendable (Int) -> Void
    /// The bandwidth cap each chunk waits for: the one of the task that made the body (the HTTP client reads
    /// it in a task of its own).
    var throttle: BandwidthThrottle? = BandwidthThrottle.current

    init(
        url: URL, offset: Int64, length: Int64, files: any FileOperations,
        onChunk: @escaping @Sendable (Int) -> Void, throttle: BandwidthThrottle? = BandwidthThrottle.current
    ) {
        self.url = url
        self.offset = offset
        self.length = length
        self.files = files
        self.onChunk = onChunk
        self.throttle = throttle
    }

    /// The chunks of a request's file body, waiting for its throttle and reporting to its `onChunk`.
    package init(_ body: HTTPFileBody) {
        self.init(
            url: body.url, offset: body.offset, length: body.length, files: body.files, onChunk: body.onChunk,
            throttle: body.throttle)
    }

    package struct AsyncIterator: AsyncIteratorProtocol {
        let url: URL
        var position: Int64
        var remaining: Int64
        let files: any FileOperations
        let onChunk: @Sendable (Int) -> Void
        let throttle: BandwidthThrottle?
        var handle: FileHandle?

        package mutating func next() async throws -> Data? {
            try await next { handle, count in
                let data = try handle.read(upToCount: count) ?? Data()
                return (data, data.count)
            }
        }

        /// The next chunk as `read` makes it, or `nil` after the last: `read` gets the file's handle,
        /// positioned at the chunk's start, and the most bytes to read, and returns the chunk and how many
        /// bytes it holds (0 only at the end of the file). An engine uses it to read into its own buffer type
        /// without a copy.
        package mutating func next<Chunk>(
            reading read: (FileHandle, Int) throws -> (chunk: Chunk, count: Int)
        ) async throws -> Chunk? {
            guard remaining > 0 else {
                try? handle?.close()
                handle = nil
                return nil
            }
            try Task.checkCancellation()
            let opened: FileHandle
            if let handle {
                opened = handle
            } else {
                opened = try files.openForReading(atPath: url.path)
                handle = opened
                try fileSystem(path: url.path) { try opened.seek(toOffset: UInt64(position)) }
            }
            let count = Int(Swift.min(Int64(FileChunks.chunkSize), remaining))
            let (chunk, got) = try fileSystem(path: url.path) { try read(opened, count) }
            guard got > 0 else {
                throw AttachmentError(
                    code: .fileSystem,
                    message: "\(url.path) ended \(remaining) bytes early while it was being uploaded",
                    path: url.path)
            }
            try await throttle?.take(got)
            position += Int64(got)
            remaining -= Int64(got)
            onChunk(got)
            return chunk
        }
    }

    package func makeAsyncIterator() -> AsyncIterator {
        AsyncIterator(
            url: url, position: offset, remaining: length, files: files, onChunk: onChunk, throttle: throttle,
            handle: nil)
    }
}

/// Counts the bytes an upload has handed to the network and reports them as its progress, out of the whole
/// file's size. One per upload, shared by all its parts (which hand bytes over at once).
final class UploadProgress: Sendable {
    private let totalBytes: Int64
    private let progress: TransferProgressHandler
    private let sent: LockedValue<Int64>

    /// Starts counting from `alreadySent` (the parts a resumed upload need not send again), and reports it.
    init(totalBytes: Int64, alreadySent: Int64 = 0, progress: @escaping TransferProgressHandler) {
        self.totalBytes = totalBytes
        self.progress = progress
        sent = LockedValue(alreadySent)
        progress(TransferProgress(completedBytes: alreadySent, totalBytes: totalBytes))
    }

    /// Counts `count` more bytes handed over, and reports the total.
    func add(_ count: Int) {
        let total = sent.withLock { sent -> Int64 in
            sent += Int64(count)
            return sent
        }
        progress(TransferProgress(completedBytes: total, totalBytes: totalBytes))
    }
}

/// The digests an upload's request carries: MD5 (base64, for `Content-MD5`) and SHA-256 (hex, for the signed
/// payload and the stored hash). Files are read in chunks through the core's file layer.
enum PayloadDigests {
    /// The digests of `length` bytes of the file at `url` from `offset` on, read through `files`.
    static func of(
        fileAt url: URL, offset: Int64, length: Int64, files: any FileOperations
    ) async throws -> (md5: String, sha256: String) {
        let digests = try await of(fileAt: url, offset: offset, length: length, md5: true, files: files)
        return (digests.md5 ?? "", digests.sha256)
    }

    /// The digests of `length` bytes of the file at `url` from `offset` on, read through `files`; the MD5
    /// only when `md5` is `true` (`nil` otherwise).
    static func of(
        fileAt url: URL, offset: Int64, length: Int64, md5 wantsMD5: Bool, files: any FileOperations
    ) async throws -> (md5: String?, sha256: String) {
        var md5 = wantsMD5 ? Insecure.MD5() : nil
        var sha256 = SHA256()
        try await files.readChunks(
            atPath: url.path, offset: offset, length: length, chunkSize: FileChunks.chunkSize
        ) { chunk in
            md5?.update(data: chunk)
            sha256.update(data: chunk)
        }
        return (md5.map { Data($0.finalize()).base64EncodedString() }, SigV4Signer.hex(sha256.finalize()))
    }

    /// The SHA-256 (hex) alone of `length` bytes of the file at `url` from `offset` on, read through `files`:
    /// for the hash stored with an object, which needs no MD5 (MD5 costs twice SHA-256's time per byte).
    static func sha256(
        ofFileAt url: URL, offset: Int64, length: Int64, files: any FileOperations
    ) async throws -> String {
        try await of(fileAt: url, offset: offset, length: length, md5: false, files: files).sha256
    }

    /// The digests of `data`.
    static func of(_ data: Data) -> (md5: String, sha256: String) {
        let digests = of(data, md5: true)
        return (digests.md5 ?? "", digests.sha256)
    }

    /// The digests of `data`; the MD5 only when `md5` is `true` (`nil` otherwise).
    static func of(_ data: Data, md5: Bool) -> (md5: String?, sha256: String) {
        (
            md5 ? Data(Insecure.MD5.hash(data: data)).base64EncodedString() : nil,
            SigV4Signer.hex(SHA256.hash(data: data))
        )
    }
}

extension FileOperations {
    /// Opens `url` for writing a download: created (with its folder) or truncated when `offset` is 0;
    /// otherwise it must hold at least `offset` bytes, is cut to exactly `offset` and written from there.
    func openDownload(_ url: URL, at offset: Int64) throws -> any FileWriter {
        try makeDirectory(atPath: url.deletingLastPathComponent().path)
        return try openForWriting(atPath: url.path, at: offset)
    }
}
