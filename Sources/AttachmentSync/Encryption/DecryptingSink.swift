import Crypto
import Foundation

/// Decrypts a large encrypted download as the wrapped adapter receives it (see ``DownloadSink``): each
/// segment is opened once all its bytes came, from whichever range they came, and its content written at
/// its place in the destination; the ciphertext never reaches a file.
///
/// The content is hashed in segment order: the writer that completes the segment next in order hashes it
/// from memory, and then the segments completed ahead of it, read back from the file (only one writer hashes
/// at a time; the others leave their segment for it).
///
/// What it does not decrypt goes to the wrapped adapter's file as that adapter would have written it: a
/// plain file, a header it cannot read, a key that is not here. The wrapper then reads that file as it
/// reads any download, and reports what is wrong the same way.
///
/// When the download fails (``keep(upTo:)``), the content decrypted without a gap from byte 0 is flushed to
/// stable storage, and then the ciphertext file is left as the state a download freeing its ciphertext leaves:
/// the header, then a hole up to the first segment not decrypted, where the next try resumes (see
/// ``EncryptedRemoteStorage/resumption(of:sealed:fetched:into:)``).
final class DecryptingSink: DownloadSink {
    private enum Mode: Equatable {
        /// Not asked yet: the follower may still take the download.
        case undecided
        /// The wrapped adapter writes its file; a follower may follow it.
        case declined
        /// Taking the bytes; the first 304 decide what happens to them.
        case awaitingHeader
        case decrypting
        /// Writing the bytes to the wrapped adapter's file.
        case passthrough
    }

    /// What decrypts the segments of the file under way.
    private struct Opened: Sendable {
        var header: EncryptedFormat.Header
        var fileKey: SymmetricKey
        var additionalData: [UInt8]
        var headerLength: Int64 { Int64(header.length) }
        var segmentSize: Int64 { Int64(header.segmentSize) }
        var whole: Int64 { Int64(header.segmentSize + EncryptedFormat.tagSize) }

        /// The ciphertext and tag of segment `index` (not the last) holding `content`.
        func seal(_ content: UnsafeRawBufferPointer, index: Int) throws -> Data {
            guard let index = UInt32(exactly: index) else {
                throw EncryptedFormat.Failure(kind: .trailingBytes, detail: "the file has more segments than any")
            }
            let box = try AES.GCM.seal(
                content, using: fileKey, nonce: EncryptedFormat.nonce(header, index: index, last: false),
                authenticating: additionalData)
            return box.ciphertext + box.tag
        }

        /// The content of segment `index`, whose ciphertext and tag are `segment`.
        func open(_ segment: UnsafeRawBufferPointer, index: Int, last: Bool) throws -> Data {
            guard let index = UInt32(exactly: index) else {
                throw EncryptedFormat.Failure(kind: .trailingBytes, detail: "the file has more segments than any")
            }
            return try EncryptedFormat.open(
                segment, index: index, last: last, header: header, fileKey: fileKey, additionalData: additionalData)
        }
    }

    /// The bytes of a segment that came so far.
    private struct Pending: Sendable {
        var bytes: [UInt8]
        /// The byte ranges of `bytes` filled, disjoint and in order.
        var filled: [Range<Int>] = []

        /// Bytes for a segment of `count` bytes: `spare` (a buffer of a segment already opened, as long) when
        /// there is one, its old bytes never read (only those filled are).
        init(count: Int, spare: [UInt8]?) {
            bytes = spare.flatMap { $0.count == count ? $0 : nil } ?? [UInt8](repeating: 0, count: count)
        }

        /// Copies `source` to `offset`; returns whether the bytes are now filled from 0 to `count`.
        mutating func fill(_ source: UnsafeRawBufferPointer, at offset: Int) -> Bool {
            bytes.withUnsafeMutableBytes { target in
                UnsafeMutableRawBufferPointer(rebasing: target[offset..<(offset + source.count)]).copyMemory(
                    from: source)
            }
            var merged = offset..<(offset + source.count)
            // The common case, in place: the bytes of one range arriving in order.
            if filled.isEmpty {
                filled.append(merged)
                return merged == 0..<bytes.count
            }
            if filled.count == 1, filled[0].upperBound == offset {
                filled[0] = filled[0].lowerBound..<merged.upperBound
                return filled[0] == 0..<bytes.count
            }
            var kept: [Range<Int>] = []
            for range in filled {
                if range.upperBound < merged.lowerBound || range.lowerBound > merged.upperBound {
                    kept.append(range)
                } else {
                    merged = min(range.lowerBound, merged.lowerBound)..<max(range.upperBound, merged.upperBound)
                }
            }
            kept.append(merged)
            kept.sort { $0.lowerBound < $1.lowerBound }
            filled = kept
            return filled.count == 1 && filled[0] == 0..<bytes.count
        }

        func covers(_ count: Int) -> Bool { filled.first.map { $0.lowerBound == 0 && $0.upperBound >= count } ?? false }
    }

    private struct State: Sendable {
        var mode = Mode.undecided
        /// Counts the starts over: work begun for an earlier start is not applied to a later one.
        var generation = 0
        /// The end of the furthest byte written.
        var end: Int64 = 0
        /// The object's first bytes, while the header is not known.
        var start: [UInt8] = []
        var deciding = false
        var opened: Opened?
        var content: PositionalFile?
        var passthrough: PositionalFile?
        var pending: [Int: Pending] = [:]
        /// Buffers of segments opened, for the next ones (a few: one per range at once is what is needed).
        var spare: [[UInt8]] = []
        /// Segments being opened, and opened (their content written) but not hashed yet.
        var opening: Set<Int> = []
        var decrypted: Set<Int> = []
        /// Segments `0..<hashed` are hashed, in order.
        var hashed = 0
        /// A writer is hashing (it owns ``DecryptingSink/hasher``).
        var hashing = false
        var failure: (any Error)?
        /// What ``DecryptingSink/keep(upTo:)`` answered, once asked.
        var kept: Int64?
        var waiters: [Int: CheckedContinuation<Void, any Error>] = [:]
        var nextWaiter = 0
    }

    private enum Step {
        case wait
        case done
        case decide(Data, generation: Int)
        case passthrough(PositionalFile)
        case decrypt(Opened, PositionalFile, generation: Int)
    }

    private let storage: EncryptedRemoteStorage
    private let attachment: Attachment
    private let sealed: URL
    private let destination: URL
    private let state = LockedValue(State())
    /// The content's digest so far; used only by the writer that set ``State/hashing``.
    private let hasher = LockedValue(SHA256())

    /// A sink for the download of `attachment`, whose wrapped adapter writes `sealed`, decrypting into
    /// `destination`.
    init(storage: EncryptedRemoteStorage, attachment: Attachment, sealed: URL, destination: URL) {
        self.storage = storage
        self.attachment = attachment
        self.sealed = sealed
        self.destination = destination
    }

    /// Whether the sink took the download (its bytes, its content and what a failure keeps are the sink's).
    var took: Bool {
        state.withLock { ![.undecided, .declined].contains($0.mode) }
    }

    /// Leaves the download to the follower, unless the sink took it already; returns whether the follower
    /// may follow it.
    func leaveToFollower() -> Bool {
        state.withLock {
            if $0.mode == .undecided { $0.mode = .declined }
            return $0.mode == .declined
        }
    }

    // MARK: DownloadSink

    func accepts(total: Int64?, from offset: Int64) -> Bool {
        state.withLock { state in
            switch state.mode {
            case .declined:
                return false
            case .undecided:
                guard offset == 0, let total, total >= EncryptedRemoteStorage.followedDownloadSize else {
                    state.mode = .declined
                    return false
                }
            case .awaitingHeader, .decrypting, .passthrough:
                guard offset == 0 else {
                    // Not asked by the HTTP adapters (a resume is decided before the sink is asked); the
                    // wrapped adapter writes its file, which the wrapper then reads as it reads any download.
                    state = State(mode: .declined, generation: state.generation + 1)
                    return false
                }
            }
            // A new start (the first, or the object's again from byte 0).
            guard let content = try? PositionalFile(path: destination.path, readable: true) else {
                state = State(mode: .declined, generation: state.generation + 1)
                return false
            }
            state = State(mode: .awaitingHeader, generation: state.generation + 1, content: content)
            hasher.withLock { $0 = SHA256() }
            return true
        }
    }

    func write(_ bytes: Data, at offset: Int64) async throws {
        while true {
            let step = try state.withLock { state -> Step in
                if let failure = state.failure { throw failure }
                state.end = max(state.end, offset + Int64(bytes.count))
                switch state.mode {
                case .undecided, .declined:
                    throw CancellationError()
                case .passthrough:
                    let file = try state.passthrough ?? PositionalFile(path: sealed.path)
                    state.passthrough = file
                    return .passthrough(file)
                case .decrypting:
                    guard let opened = state.opened, let content = state.content else { throw CancellationError() }
                    return .decrypt(opened, content, generation: state.generation)
                case .awaitingHeader:
                    let held = Int64(state.start.count)
                    guard offset <= held, held < 304 else { return .wait }
                    state.start += bytes.dropFirst(Int(held - offset))
                    guard state.start.count >= 304, !state.deciding else { return .done }
                    state.deciding = true
                    return .decide(Data(state.start.prefix(304)), generation: state.generation)
                }
            }
            switch step {
            case .wait:
                try await headerDecided()
            case .done:
                return
            case .decide(let start, let generation):
                try await decide(start, generation: generation)
                return
            case .passthrough(let file):
                try file.write(bytes, at: offset)
                return
            case .decrypt(let opened, let content, let generation):
                try assemble(bytes, at: offset, opened, content, generation: generation)
                return
            }
        }
    }

    func keep(upTo end: Int64) -> Int64 {
        let taken = ended()
        // Asked again (by the adapter's outer layers as well): the same answer, the files left as they are.
        if let kept = taken.kept { return kept }
        let kept = keeping(taken, upTo: end)
        state.withLock { $0.kept = kept }
        return kept
    }

    private func keeping(_ taken: State, upTo end: Int64) -> Int64 {
        switch taken.mode {
        case .undecided, .declined:
            return end
        case .passthrough:
            // The wrapped adapter's file holds what it was handed.
            return end
        case .awaitingHeader:
            emptySealed()
            return 0
        case .decrypting:
            guard let opened = taken.opened, let content = taken.content else { return 0 }
            let kept = Int64(taken.hashed)
            let resumeAt = opened.headerLength + kept * opened.whole
            // The state a follower freeing its ciphertext leaves, which a resume reads: the header, a hole up to
            // a multiple of the alignment, then ciphertext up to where the download goes on. A resume takes the
            // hole's end for where the content kept ends (the first segment starting there), so the bytes from
            // there on must be the ciphertext's: they are sealed again from the content (the same key, nonce
            // and bytes seal to the same ciphertext).
            let holeEnd = resumeAt / FileHoles.alignment * FileHoles.alignment
            // The content, on stable storage before the ciphertext file says it is there.
            guard holeEnd > FileHoles.alignment,
                (try? content.truncate(to: kept * opened.segmentSize)) != nil,
                (try? content.synchronize()) != nil
            else {
                emptySealed()
                return 0
            }
            do {
                let file = try PositionalFile(path: sealed.path)
                try opened.header.bytes.withUnsafeBytes { try file.write(contentsOf: $0, at: 0) }
                let segmentContent = UnsafeMutableRawBufferPointer.allocate(
                    byteCount: Int(opened.segmentSize), alignment: 64)
                defer { segmentContent.deallocate() }
                for index in (holeEnd - opened.headerLength) / opened.whole..<kept {
                    try content.read(into: segmentContent, at: index * opened.segmentSize)
                    let ciphertext = try opened.seal(UnsafeRawBufferPointer(segmentContent), index: Int(index))
                    let start = opened.headerLength + index * opened.whole
                    try file.write(ciphertext.dropFirst(Int(max(0, holeEnd - start))), at: max(start, holeEnd))
                }
                try file.truncate(to: resumeAt)
                // A file system without holes shows none, and its zeros would be taken for ciphertext.
                guard file.dataStart(from: FileHoles.alignment) == holeEnd else {
                    try file.truncate(to: 0)
                    return 0
                }
                return resumeAt
            } catch {
                emptySealed()
                return 0
            }
        }
    }

    /// The state as the download left it; every later write fails, and the files are no longer the sink's.
    private func ended() -> State {
        state.withLock { state in
            let taken = state
            state.failure = CancellationError()
            state.content = nil
            state.passthrough = nil
            state.pending = [:]
            return taken
        }
    }

    /// The content's size and SHA-256 once the wrapped adapter returned, the file whole; `nil` when the
    /// sink did not decrypt it (the wrapped adapter's file then holds the object). Throws `integrityMismatch`
    /// when the file is cut short or its last segment does not authenticate.
    func finish() async throws -> RemoteObjectInfo? {
        let taken = ended()
        switch taken.mode {
        case .undecided, .declined, .passthrough:
            return nil
        case .awaitingHeader:
            // An object too short to tell: the wrapped adapter's file gets it, and the wrapper reads it.
            let file = try PositionalFile(path: sealed.path)
            try file.write(Data(taken.start), at: 0)
            return nil
        case .decrypting:
            break
        }
        guard let opened = taken.opened, let content = taken.content else { return nil }
        do {
            let body = taken.end - opened.headerLength
            let lastIndex = Int(body / opened.whole)
            let lastLength = Int(body % opened.whole)
            guard body >= 0, lastLength >= EncryptedFormat.tagSize else {
                throw EncryptedFormat.Failure(kind: .truncated, detail: "the content ends before its last segment")
            }
            guard taken.hashed == lastIndex, taken.opening.isEmpty, let last = taken.pending[lastIndex],
                last.covers(lastLength)
            else {
                throw EncryptedFormat.Failure(kind: .truncated, detail: "segment \(taken.hashed) never came whole")
            }
            let tail = try last.bytes.withUnsafeBytes {
                try opened.open(UnsafeRawBufferPointer(rebasing: $0[..<lastLength]), index: lastIndex, last: true)
            }
            let contentSize = Int64(lastIndex) * opened.segmentSize + Int64(tail.count)
            try content.write(tail, at: Int64(lastIndex) * opened.segmentSize)
            try content.truncate(to: contentSize)
            let digest = hasher.withLock { hasher in
                hasher.update(data: tail)
                return FileStreaming.hex(hasher.finalize())
            }
            return RemoteObjectInfo(writtenSize: contentSize, writtenSHA256: digest)
        } catch let failure as EncryptedFormat.Failure {
            throw EncryptedRemoteStorage.rejected(attachment, failure)
        }
    }

    // MARK: The header

    /// Waits until the header decided what happens to the bytes.
    private func headerDecided() async throws {
        let id = state.withLock {
            $0.nextWaiter += 1
            return $0.nextWaiter
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let now = state.withLock { state -> Result<Void, any Error>? in
                    if let failure = state.failure { return .failure(failure) }
                    if Task.isCancelled { return .failure(CancellationError()) }
                    guard state.mode == .awaitingHeader else { return .success(()) }
                    state.waiters[id] = continuation
                    return nil
                }
                if let now { continuation.resume(with: now) }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume(throwing: CancellationError())
        }
    }

    /// Decides from the object's first 304 bytes whether the sink decrypts it, then hands the bytes held
    /// so far on.
    private func decide(_ start: Data, generation: Int) async throws {
        var opened: Opened?
        if !storage.readsPlain(start, attachment),
            let header = try? EncryptedRemoteStorage.header(of: start, attachment)
        {
            do {
                let master = try await storage.masterKey(header.keyId, for: attachment)
                try header.validate()
                opened = Opened(
                    header: header, fileKey: EncryptedFormat.fileKey(master: master, header: header),
                    additionalData: EncryptedFormat.additionalData(header, attachmentId: attachment.id))
            } catch is CancellationError {
                fail(CancellationError())
                throw CancellationError()
            } catch {
                // No key, or a provider failing: the wrapper asks again once the file is there.
                opened = nil
            }
        }
        var passthrough: PositionalFile?
        if opened == nil {
            do {
                passthrough = try PositionalFile(path: sealed.path)
            } catch {
                fail(error)
                throw error
            }
        }
        let decided = state.withLock { state -> (waiters: [CheckedContinuation<Void, any Error>], held: Data)? in
            guard state.generation == generation, state.failure == nil else { return nil }
            state.deciding = false
            if let opened {
                state.mode = .decrypting
                state.opened = opened
            } else {
                state.mode = .passthrough
                state.passthrough = passthrough
            }
            let held = Data(state.start)
            state.start = []
            defer { state.waiters = [:] }
            return (Array(state.waiters.values), held)
        }
        guard let decided else { throw CancellationError() }
        for waiter in decided.waiters { waiter.resume() }
        try await write(decided.held, at: 0)
    }

    /// Stops every writer with `error`.
    private func fail(_ error: any Error) {
        let waiters = state.withLock { state in
            if state.failure == nil { state.failure = error }
            defer { state.waiters = [:] }
            return Array(state.waiters.values)
        }
        for waiter in waiters { waiter.resume(throwing: error) }
    }

    /// Leaves the wrapped adapter's file empty (nothing to resume from).
    private func emptySealed() {
        _ = try? PositionalFile(path: sealed.path)
    }

    // MARK: Segments

    /// Adds `bytes` at `offset` to the segments they belong to, and opens those they complete.
    private func assemble(
        _ bytes: Data, at offset: Int64, _ opened: Opened, _ content: PositionalFile, generation: Int
    ) throws {
        var position = offset
        var rest = bytes[...]
        if position < opened.headerLength {
            let skipped = Int(min(Int64(rest.count), opened.headerLength - position))
            rest = rest.dropFirst(skipped)
            position += Int64(skipped)
        }
        while !rest.isEmpty {
            let body = position - opened.headerLength
            let index = Int(body / opened.whole)
            let within = Int(body % opened.whole)
            let count = min(Int(opened.whole) - within, rest.count)
            let piece = rest.prefix(count)
            let complete = try state.withLock { state -> [UInt8]? in
                if let failure = state.failure { throw failure }
                guard state.generation == generation else { throw CancellationError() }
                guard index >= state.hashed, !state.opening.contains(index), !state.decrypted.contains(index)
                else { return nil }
                // Taken out of the table while it is filled, so that its bytes are not copied (one owner).
                var pending =
                    state.pending.removeValue(forKey: index)
                    ?? Pending(count: Int(opened.whole), spare: state.spare.popLast())
                guard piece.withUnsafeBytes({ pending.fill($0, at: within) }) else {
                    state.pending[index] = pending
                    return nil
                }
                state.opening.insert(index)
                return pending.bytes
            }
            if let complete {
                do {
                    let segmentContent = try complete.withUnsafeBytes { try opened.open($0, index: index, last: false) }
                    state.withLock { if $0.spare.count < 8 { $0.spare.append(complete) } }
                    try content.write(segmentContent, at: Int64(index) * opened.segmentSize)
                    try hashInOrder(after: index, segmentContent, content, opened)
                } catch let failure as EncryptedFormat.Failure {
                    let error = EncryptedRemoteStorage.rejected(attachment, failure)
                    fail(error)
                    throw error
                } catch {
                    fail(error)
                    throw error
                }
            }
            rest = rest.dropFirst(count)
            position += Int64(count)
        }
    }

    /// Marks segment `index` (whose content is `segmentContent`) decrypted, and hashes every segment next in
    /// order unless another writer does.
    private func hashInOrder(after index: Int, _ segmentContent: Data, _ content: PositionalFile, _ opened: Opened)
        throws
    {
        let hashes = state.withLock { state -> Bool in
            state.opening.remove(index)
            state.decrypted.insert(index)
            guard !state.hashing else { return false }
            state.hashing = true
            return true
        }
        guard hashes else { return }
        var readBack: UnsafeMutableRawBufferPointer?
        defer { readBack?.deallocate() }
        do {
            while let next = state.withLock({ state -> Int? in
                guard state.decrypted.remove(state.hashed) != nil else {
                    state.hashing = false
                    return nil
                }
                state.hashed += 1
                return state.hashed - 1
            }) {
                if next == index {
                    hasher.withLock { $0.update(data: segmentContent) }
                } else {
                    // Completed ahead of its turn by another range: read back from the page cache.
                    let buffer =
                        readBack
                        ?? UnsafeMutableRawBufferPointer.allocate(byteCount: Int(opened.segmentSize), alignment: 64)
                    readBack = buffer
                    try content.read(into: buffer, at: Int64(next) * opened.segmentSize)
                    hasher.withLock { $0.update(bufferPointer: UnsafeRawBufferPointer(buffer)) }
                }
            }
        } catch {
            state.withLock { $0.hashing = false }
            throw error
        }
    }
}
