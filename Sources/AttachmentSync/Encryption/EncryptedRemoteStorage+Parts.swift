import Crypto
import Foundation

/// Large uploads without a sealed copy: when the wrapped adapter uploads in parts (``PartwiseUploading``),
/// each part of the encrypted file is made from the content just before it goes.
extension EncryptedRemoteStorage {
    /// Uploads the file at `fileURL` encrypted, in parts the wrapped adapter asks for one at a time: a first
    /// pass over the content seals it without writing anything (for the encrypted file's SHA-256, stored with
    /// the object and sent when the upload starts, and to check the content against the record), then each
    /// part is sealed again into a file of its own beside the content when it is about to go, and removed
    /// after. The encryption is deterministic (see ``header(for:contentSHA256:keyId:key:)``), so the parts
    /// are the bytes the first pass hashed, and an upload resumed later sends the same ones.
    ///
    /// - Throws: As ``uploadFile(fileURL:attachment:progress:)``; `integrityMismatch` also when the content
    ///   changed between the passes (a segment sealed again has another tag than the first pass gave it):
    ///   the upload stops before that part goes.
    func uploadInParts(
        _ fileURL: URL, of attachment: Attachment, to base: any PartwiseUploading,
        progress: @escaping TransferProgressHandler
    ) async throws {
        let files = SystemFileOperations()
        let modified = try files.infoFollowingLinks(atPath: fileURL.path)?.modificationTime ?? 0
        let (contentSize, sealedSize, sealedSHA256, stream, tags) = try await seal(
            fileURL, of: attachment, writingTo: nil)
        let parts = SealedParts(
            content: fileURL, contentSize: contentSize, stream: stream, tags: tags, size: sealedSize,
            sha256: sealedSHA256, modificationTime: modified)
        try await base.uploadParts(
            parts, attachment: Self.stored(attachment, size: sealedSize, sha256: sealedSHA256)
        ) { sent in
            progress(Self.contentProgress(sent, contentSize: contentSize, storedSize: sealedSize))
        }
    }

    /// The encrypted file of a content file, made a range at a time: the header's bytes, then each segment
    /// the range touches sealed from the content (as the stream that sealed the whole file sealed it).
    struct SealedParts: UploadParts {
        let content: URL
        let contentSize: Int64
        let stream: EncryptingStream
        /// Every segment's tag as the first pass sealed it (16 bytes each): a segment sealed again to another
        /// tag is other content.
        let tags: [UInt8]
        let size: Int64
        let sha256: String
        let modificationTime: Double

        func materialize(offset: Int64, length: Int64, md5 wantsMD5: Bool) async throws -> MadePart {
            // A part of an upload already stopped (or failed elsewhere) is not sealed: up to a part size of
            // work and disk for nothing.
            try Task.checkCancellation()
            let target = content.deletingLastPathComponent().appendingPathComponent(FileName.uniqueTemporaryName())
            do {
                return try await onBlockingThread {
                    var sha256 = SHA256()
                    var md5 = wantsMD5 ? Insecure.MD5() : nil
                    try write(offset: offset, length: length, to: target) { bytes in
                        sha256.update(bufferPointer: bytes)
                        md5?.update(bufferPointer: bytes)
                    }
                    return MadePart(
                        url: target, sha256: FileStreaming.hex(sha256.finalize()),
                        md5: md5.map { Data($0.finalize()).base64EncodedString() })
                }
            } catch {
                try? SystemFileOperations().removeFile(atPath: target.path)
                throw error
            }
        }

        /// Writes bytes `offset..<offset + length` of the encrypted file into `target` (created or truncated),
        /// handing each run of bytes to `written` as it goes.
        func write(
            offset: Int64, length: Int64, to target: URL, written: (UnsafeRawBufferPointer) -> Void = { _ in }
        ) throws {
            guard offset >= 0, length >= 0, offset + length <= size else {
                throw AttachmentError(
                    code: .invalidConfiguration,
                    message: "bytes \(offset)..<\(offset + length) are not within the \(size) of the encrypted file")
            }
            let files = SystemFileOperations()
            let output = try files.openForWriting(atPath: target.path, at: nil)
            defer { output.close() }
            let input = try files.openForReading(atPath: content.path)
            defer { try? input.close() }
            let header = stream.header.bytes
            let headerLength = Int64(header.count)
            let segmentSize = Int64(stream.header.segmentSize)
            let whole = segmentSize + Int64(EncryptedFormat.tagSize)
            let lastIndex = contentSize / segmentSize
            let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Int(segmentSize), alignment: 64)
            defer { buffer.deallocate() }
            var position = offset
            let end = offset + length
            if position < headerLength {
                let upTo = min(headerLength, end)
                try header[Int(position)..<Int(upTo)].withUnsafeBytes {
                    written($0)
                    try output.write(contentsOf: $0)
                }
                position = upTo
            }
            while position < end {
                let index = (position - headerLength) / whole
                let segmentStart = headerLength + index * whole
                let contentStart = index * segmentSize
                let contentLength = Int(max(0, min(segmentSize, contentSize - contentStart)))
                let wanted = UnsafeMutableRawBufferPointer(rebasing: buffer[..<contentLength])
                try input.seek(toOffset: UInt64(contentStart))
                guard try readFully(input.fileDescriptor, into: wanted) == contentLength else {
                    throw AttachmentError(
                        code: .integrityMismatch,
                        message: "\(content.path) got shorter while it was uploaded; the upload stops",
                        path: content.path)
                }
                guard index <= Int64(UInt32.max) else {
                    throw EncryptedFormat.Failure(kind: .badHeader, detail: "the content is too long for one file")
                }
                let box = try stream.sealed(
                    UnsafeRawBufferPointer(wanted), index: UInt32(index), last: index == lastIndex)
                let tagStart = Int(index) * EncryptedFormat.tagSize
                guard tagStart + EncryptedFormat.tagSize <= tags.count,
                    box.tag.elementsEqual(tags[tagStart..<(tagStart + EncryptedFormat.tagSize)])
                else {
                    throw AttachmentError(
                        code: .integrityMismatch,
                        message: "\(content.path) changed while it was uploaded (segment \(index) is not what was "
                            + "sealed); the upload stops", path: content.path)
                }
                let from = Int(position - segmentStart)
                let upTo = Int(min(end - segmentStart, Int64(contentLength + EncryptedFormat.tagSize)))
                // The segment as the stream emits it: its ciphertext, then its tag; the part of it in range.
                if from < contentLength {
                    try box.ciphertext.dropFirst(from).prefix(min(upTo, contentLength) - from).withUnsafeBytes {
                        written($0)
                        try output.write(contentsOf: $0)
                    }
                }
                if upTo > contentLength {
                    try box.tag.dropFirst(max(0, from - contentLength)).prefix(upTo - max(from, contentLength))
                        .withUnsafeBytes {
                            written($0)
                            try output.write(contentsOf: $0)
                        }
                }
                position = segmentStart + Int64(upTo)
            }
        }
    }
}
