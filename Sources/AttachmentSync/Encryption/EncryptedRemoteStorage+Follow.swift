import Crypto
import Foundation

/// Decrypting a download while the wrapped adapter writes its ciphertext (see ``DownloadTap``), so that the
/// decryption of a large file overlaps its transfer instead of following it.
extension EncryptedRemoteStorage {
    /// Downloads of content at least this large (or of unknown size) are decrypted as they arrive; smaller
    /// ones once they are there (a follower costs more than it overlaps).
    static let followedDownloadSize: Int64 = 1 << 20

    /// At most this many ciphertext bytes are decrypted in one call on a blocking thread, between checks for
    /// cancellation and new reports.
    static let followStep: Int64 = 8 << 20

    /// The follower's state. Only the follower's task uses it, handing it to one blocking call at a time and
    /// awaiting that call before it touches it again, so no two threads ever use it at once; that is why it
    /// may be `@unchecked Sendable`. (A resumed state is made before the follower's task and not used by its
    /// maker after it is handed over.)
    final class Following: @unchecked Sendable {
        var generation: Int
        /// Ciphertext bytes decrypted (from byte 0 of the file).
        var consumed: Int64 = 0
        var stream: DecryptingStream?
        var hasher = SHA256()
        var written: Int64 = 0
        var input: FileHandle?
        var output: (any FileWriter)?
        /// The file's header length and segment size, once its header is read.
        var layout: (headerLength: Int64, segmentSize: Int64)?
        /// A resumed download whose key was not here when it was resumed: the header, and the segment to
        /// decrypt on from once the key is (see ``EncryptedRemoteStorage/resumption(of:sealed:fetched:into:)``).
        var awaitingKey: (header: EncryptedFormat.Header, segment: UInt32)?
        /// Content bytes flushed to stable storage (all of them before ciphertext is freed).
        var flushed: Int64 = 0
        /// The ciphertext file is a hole from ``FileHoles/alignment`` up to here.
        var freedUpTo: Int64 = FileHoles.alignment
        /// The ciphertext file opened for freeing its bytes; `nil` until needed, or when it cannot be.
        var freeing: FileHandle?
        var canFree = true
        /// What the ciphertext is read into, 1 MiB at a time.
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)

        init(generation: Int) { self.generation = generation }

        deinit { buffer.deallocate() }

        func close() {
            try? input?.close()
            output?.close()
            try? freeing?.close()
            input = nil
            output = nil
            freeing = nil
        }
    }

    /// The follower's state for a download whose earlier try freed ciphertext it had decrypted: the content
    /// before the first byte of ciphertext still kept (the hole in `sealed` ends there) is kept, and the
    /// follower decrypts on from the segment that starts there. `nil` when nothing was freed: then the
    /// ciphertext is whole and is decrypted from byte 0 (what `destination` holds is not trusted).
    ///
    /// When ciphertext was freed but cannot be resumed (its header unreadable, or the content it was
    /// decrypted into shorter than it must be), the kept ciphertext is removed and `fetched` set to 0: the
    /// download starts over. When the header's key is not here, the state waits for it (everything kept):
    /// the object may have been encrypted again under another key since (a rotation), which the wrapped
    /// adapter finds out when it starts the file over; if it does not, the follower asks for the key again
    /// and the download ends with `keyUnavailable`, the content and ciphertext kept for when it comes.
    func resumption(of attachment: Attachment, sealed: URL, fetched: inout Int64, into destination: URL)
        async throws -> Following?
    {
        let holeStart = FileHoles.alignment
        guard fetched > holeStart else { return nil }
        let files = SystemFileOperations()
        let input = try files.openForReading(atPath: sealed.path)
        var handedOver = false
        defer { if !handedOver { try? input.close() } }
        guard let dataStart = FileHoles.dataStart(input.fileDescriptor, from: holeStart), dataStart > holeStart
        else { return nil }
        func discard() {
            try? files.removeFile(atPath: sealed.path)
            try? files.removeFile(
                atPath: sealed.deletingLastPathComponent().appendingPathComponent(
                    FileName.resumeValidatorName(for: sealed.lastPathComponent)
                ).path)
            fetched = 0
        }
        guard let header = try? EncryptedFormat.Header.parse(Array(try Self.start(of: sealed))) else {
            discard()
            return nil
        }
        // Without the key the state waits for it (see above); any other failure to get it is thrown.
        var key: SymmetricKey?
        do {
            key = try await masterKey(header.keyId, for: attachment)
        } catch let error as AttachmentError where error.code == .keyUnavailable {
            key = nil
        }
        let segmentSize = Int64(header.segmentSize)
        let whole = segmentSize + Int64(EncryptedFormat.tagSize)
        let headerLength = Int64(header.length)
        // The first segment that starts in the ciphertext still kept.
        let segment = (dataStart - headerLength + whole - 1) / whole
        let resumeAt = headerLength + segment * whole
        let contentKept = segment * segmentSize
        guard segment <= Int64(UInt32.max), resumeAt <= fetched,
            let contentSize = try files.info(atPath: destination.path)?.size, contentSize >= contentKept
        else {
            discard()
            return nil
        }
        let state = Following(generation: 0)
        if let key {
            state.stream = try DecryptingStream(
                header: header, masterKey: key, attachmentId: attachment.id, fromSegment: UInt32(segment))
        } else {
            state.awaitingKey = (header, UInt32(segment))
        }
        state.layout = (headerLength, segmentSize)
        state.consumed = resumeAt
        state.written = contentKept
        state.flushed = contentKept
        state.freedUpTo = dataStart
        // The content kept is hashed again from the file: the digest returned is of the bytes on disk.
        state.hasher = try await onBlockingThread {
            let buffer = state.buffer
            let kept = try files.openForReading(atPath: destination.path)
            defer { try? kept.close() }
            var hasher = SHA256()
            var remaining = contentKept
            while remaining > 0 {
                let wanted = UnsafeMutableRawBufferPointer(
                    rebasing: buffer[..<Int(min(remaining, Int64(buffer.count)))])
                guard try readFully(kept.fileDescriptor, into: wanted) == wanted.count else {
                    throw AttachmentError(
                        code: .fileSystem, message: "\(destination.path) got shorter while it was read",
                        path: destination.path)
                }
                hasher.update(bufferPointer: UnsafeRawBufferPointer(wanted))
                remaining -= Int64(wanted.count)
            }
            return hasher
        }
        state.input = input
        state.output = try files.openForWriting(atPath: destination.path, at: contentKept)
        handedOver = true
        return state
    }

    /// Decrypts the ciphertext in `sealed` into `destination` as `tap` reports it written, until the tap is
    /// finished; returns the content's size and SHA-256 when it decrypted the whole file as it stood at the
    /// last report, and the file authenticated to its last segment.
    ///
    /// Returns `nil` (having left `destination` to be written again) when it cannot: a plain file, a header
    /// it cannot read, a key that is not here, bytes that do not decrypt, or cancellation. The caller then
    /// reads the file itself, and reports what is wrong as a download does.
    func follow(
        _ tap: DownloadTap, sealed: URL, into destination: URL, attachment: Attachment, resumed: Following? = nil
    ) async -> RemoteObjectInfo? {
        let state = resumed ?? Following(generation: tap.progress.generation)
        defer { state.close() }
        do {
            for await _ in tap.reports {
                try await advance(
                    state, to: tap.progress, tap: tap, sealed: sealed, destination: destination, attachment)
            }
            // The tap is finished: the last report covers the whole file.
            let last = tap.progress
            try await advance(state, to: last, tap: tap, sealed: sealed, destination: destination, attachment)
            guard last.generation == state.generation, state.consumed == last.end, var stream = state.stream,
                let output = state.output
            else { return nil }
            try stream.finish { tail in
                state.hasher.update(bufferPointer: tail)
                try output.write(contentsOf: tail)
                state.written += Int64(tail.count)
            }
            return RemoteObjectInfo(
                writtenSize: state.written, writtenSHA256: FileStreaming.hex(state.hasher.finalize()))
        } catch {
            // Nothing to report here: the download then reads the file itself, and reports what is wrong.
            return nil
        }
    }

    /// Decrypts what `progress` says is written beyond what `state` consumed; starts over when the file
    /// was.
    private func advance(
        _ state: Following, to progress: DownloadTap.Progress, tap: DownloadTap, sealed: URL, destination: URL,
        _ attachment: Attachment
    ) async throws {
        try Task.checkCancellation()
        if progress.generation != state.generation {
            state.close()
            state.generation = progress.generation
            state.consumed = 0
            state.stream = nil
            state.hasher = SHA256()
            state.written = 0
            state.layout = nil
            state.flushed = 0
            state.freedUpTo = FileHoles.alignment
            state.awaitingKey = nil
        }
        guard progress.end > state.consumed else { return }
        if let (header, segment) = state.awaitingKey {
            // A resumed download, the file not started over: it decrypts on from the content kept, with the
            // key of the ciphertext kept (throws `keyUnavailable` while it is not here, touching nothing).
            let key = try await masterKey(header.keyId, for: attachment)
            state.stream = try DecryptingStream(
                header: header, masterKey: key, attachmentId: attachment.id, fromSegment: segment)
            state.awaitingKey = nil
        }
        if state.stream == nil {
            // The header and the decision plain or encrypted need the first 304 bytes (or the whole file).
            guard progress.end >= 304 else { return }
            let start = try Self.start(of: sealed)
            guard !readsPlain(start, attachment) else { throw CancellationError() }
            let header = try Self.header(of: start, attachment)
            let key = try await masterKey(header.keyId, for: attachment)
            let files = SystemFileOperations()
            state.input = try files.openForReading(atPath: sealed.path)
            state.output = try files.openForWriting(atPath: destination.path, at: nil)
            state.stream = DecryptingStream(attachmentId: attachment.id) { _ in key }
            state.layout = (Int64(header.length), Int64(header.segmentSize))
        }
        while state.consumed < progress.end {
            try Task.checkCancellation()
            let end = min(progress.end, state.consumed + Self.followStep)
            try await onBlockingThread {
                guard let input = state.input, let output = state.output, var stream = state.stream else { return }
                // Taken out while it runs, so that it is changed in place (no copy of the segment it holds).
                state.stream = nil
                defer { state.stream = stream }
                try input.seek(toOffset: UInt64(state.consumed))
                while state.consumed < end {
                    let wanted = UnsafeMutableRawBufferPointer(
                        rebasing: state.buffer[..<Int(min(end - state.consumed, Int64(state.buffer.count)))])
                    guard try readFully(input.fileDescriptor, into: wanted) == wanted.count else {
                        throw EncryptedFormat.Failure(kind: .truncated, detail: "the file is shorter than reported")
                    }
                    state.consumed += Int64(wanted.count)
                    try stream.update(UnsafeRawBufferPointer(wanted)) { content in
                        state.hasher.update(bufferPointer: content)
                        try output.write(contentsOf: content)
                        state.written += Int64(content.count)
                    }
                }
                try freeDecrypted(state, tap: tap, sealed: sealed)
            }
        }
    }

    /// Once ``freeingInterval`` more content bytes were written: flushes the content to stable storage, then
    /// frees the ciphertext of every segment decrypted (whole blocks of ``FileHoles/alignment`` bytes past
    /// the first, which holds the header), unless the wrapped adapter started the file over meanwhile. The
    /// flush comes first so that, whatever crash follows, the ciphertext freed is on disk as content.
    private func freeDecrypted(_ state: Following, tap: DownloadTap, sealed: URL) throws {
        guard state.canFree, state.written - state.flushed >= freeingInterval, let output = state.output,
            let layout = state.layout
        else { return }
        try output.synchronize()
        state.flushed = state.written
        // Before the stream is finished, the content written is whole segments.
        let segments = state.written / layout.segmentSize
        let decrypted = layout.headerLength + segments * (layout.segmentSize + Int64(EncryptedFormat.tagSize))
        let end = decrypted / FileHoles.alignment * FileHoles.alignment
        guard end > state.freedUpTo else { return }
        if state.freeing == nil { state.freeing = FileHandle(forWritingAtPath: sealed.path) }
        guard let freeing = state.freeing else {
            state.canFree = false
            return
        }
        tap.unlessStartedOver(since: state.generation) {
            if FileHoles.punch(freeing.fileDescriptor, offset: state.freedUpTo, length: end - state.freedUpTo) {
                state.freedUpTo = end
            } else {
                // A file system without holes: the ciphertext stays whole until the download ends.
                state.canFree = false
            }
        }
    }
}
