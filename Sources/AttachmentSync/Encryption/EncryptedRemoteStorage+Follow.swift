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
    /// may be `@unchecked Sendable`.
    final class Following: @unchecked Sendable {
        var generation: Int
        /// Ciphertext bytes decrypted (from byte 0 of the file).
        var consumed: Int64 = 0
        var stream: DecryptingStream?
        var hasher = SHA256()
        var written: Int64 = 0
        var input: FileHandle?
        var output: (any FileWriter)?
        /// What the ciphertext is read into, 1 MiB at a time.
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 64)

        init(generation: Int) { self.generation = generation }

        deinit { buffer.deallocate() }

        func close() {
            try? input?.close()
            output?.close()
            input = nil
            output = nil
        }
    }

    /// Decrypts the ciphertext in `sealed` into `destination` as `tap` reports it written, until the tap is
    /// finished; returns the content's size and SHA-256 when it decrypted the whole file as it stood at the
    /// last report, and the file authenticated to its last segment.
    ///
    /// Returns `nil` (having left `destination` to be written again) when it cannot: a plain file, a header
    /// it cannot read, a key that is not here, bytes that do not decrypt, or cancellation. The caller then
    /// reads the file itself, and reports what is wrong as a download does.
    func follow(_ tap: DownloadTap, sealed: URL, into destination: URL, attachment: Attachment) async
        -> RemoteObjectInfo?
    {
        let state = Following(generation: tap.progress.generation)
        defer { state.close() }
        do {
            for await _ in tap.reports {
                try await advance(state, to: tap.progress, sealed: sealed, destination: destination, attachment)
            }
            // The tap is finished: the last report covers the whole file.
            let last = tap.progress
            try await advance(state, to: last, sealed: sealed, destination: destination, attachment)
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
        _ state: Following, to progress: DownloadTap.Progress, sealed: URL, destination: URL,
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
        }
        guard progress.end > state.consumed else { return }
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
            }
        }
    }
}
