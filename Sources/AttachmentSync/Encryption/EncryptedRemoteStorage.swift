import Crypto
import Foundation

/// A remote that stores only ciphertext: it encrypts each file before another adapter uploads it and
/// decrypts what that adapter downloads, in the format of <doc:EncryptedAttachmentFormat>, with keys from
/// the app's ``KeyProvider``.
///
/// The wrapped adapter sees an encrypted file: its size, and as its SHA-256 the ciphertext's (what it
/// stores with the object, and what create-only compares), never the content's. The same attachment always
/// encrypts to the same bytes (the salt and nonce prefix are derived from the key, the attachment's id and
/// its content's SHA-256), so an upload tried again after a crash is the same upload, and create-only holds;
/// two attachments with the same content encrypt differently.
///
/// ```swift
/// let remote = EncryptedRemoteStorage(wrapping: s3, keys: StaticKeyProvider(keys: ["k1": key], current: "k1"))
/// let queue = AttachmentQueue(db: db, remoteStorage: remote, configuration: configuration)
/// ```
///
/// An app that turns encryption on with files already stored lets them be read with ``plaintextReads``.
/// Stored files move to a new key with ``KeyRotation``; transfers go to a ``BackgroundTransferService``
/// when the wrapped adapter forms them (see ``backgroundUpload(for:fileURL:bodyFile:)``).
public struct EncryptedRemoteStorage: RemoteStorageAdapter {
    /// The adapter that stores the ciphertext.
    public let base: any RemoteStorageAdapter
    /// Where the keys come from.
    public let keys: any KeyProvider
    /// Which stored files may be read although they are not encrypted.
    public let plaintextReads: PlaintextReads
    /// Content bytes per segment (tests use small ones).
    let segmentSize: Int
    /// Content bytes a large download decrypts between two flushes of its content, after each of which the
    /// ciphertext behind it is freed (tests use small ones).
    let freeingInterval: Int64

    /// Encrypts what `base` stores with keys from `keys`.
    ///
    /// - Parameters:
    ///   - base: The adapter that stores the ciphertext.
    ///   - keys: Where the keys come from.
    ///   - plaintextReads: Which stored files may be plain (stored before encryption was turned on). The
    ///     default is ``PlaintextReads/refused``: every file must decrypt.
    public init(
        wrapping base: any RemoteStorageAdapter, keys: any KeyProvider, plaintextReads: PlaintextReads = .refused
    ) {
        self.init(
            wrapping: base, keys: keys, plaintextReads: plaintextReads, segmentSize: EncryptedFormat.defaultSegmentSize)
    }

    init(
        wrapping base: any RemoteStorageAdapter, keys: any KeyProvider, plaintextReads: PlaintextReads = .refused,
        segmentSize: Int, freeingInterval: Int64 = 64 << 20
    ) {
        self.base = base
        self.keys = keys
        self.plaintextReads = plaintextReads
        self.segmentSize = segmentSize
        self.freeingInterval = freeingInterval
    }

    // MARK: Keys and headers

    /// The key `id`; throws `keyUnavailable` naming the id (never the key) when the provider has none.
    func masterKey(_ id: String, for attachment: Attachment) async throws -> SymmetricKey {
        guard let key = try await keys.key(id: id) else {
            throw AttachmentError(
                code: .keyUnavailable,
                message: "the encryption key \(String(reflecting: id)) is not on this device; attachment "
                    + "\(String(reflecting: attachment.id)) waits for it", attachmentId: attachment.id, name: id)
        }
        guard key.bitCount == 256 else {
            throw AttachmentError(
                code: .invalidConfiguration,
                message: "the encryption key \(String(reflecting: id)) is \(key.bitCount) bits, not 256", name: id)
        }
        return key
    }

    /// The header of the attachment's encrypted file: its salt and nonce prefix derived from the key, the
    /// attachment's id and the content's SHA-256, so the same attachment always encrypts to the same bytes.
    func header(for attachment: Attachment, contentSHA256: String, keyId: String, key: SymmetricKey) throws
        -> EncryptedFormat.Header
    {
        func derive(_ label: String) -> [UInt8] {
            let message = Data("AttachmentSync v1 \(label)\u{0}\(keyId)\u{0}\(attachment.id)\u{0}\(contentSHA256)".utf8)
            return Array(HMAC<SHA256>.authenticationCode(for: message, using: key))
        }
        let header = EncryptedFormat.Header(
            keyId: keyId, segmentSize: segmentSize, salt: derive("salt"),
            noncePrefix: Array(derive("nonce").prefix(EncryptedFormat.noncePrefixSize)))
        try header.validate()
        return header
    }

    /// The attachment as the wrapped adapter sees its ciphertext: for an upload, the ciphertext's size and
    /// SHA-256; otherwise neither (the content's would not match the object).
    static func stored(_ attachment: Attachment, size: Int64? = nil, sha256: String? = nil) -> Attachment {
        Attachment(
            id: attachment.id, filename: attachment.filename, state: attachment.state,
            timestamp: attachment.timestamp, hasSynced: attachment.hasSynced, localUri: attachment.localUri,
            mediaType: attachment.mediaType, size: size, metaData: attachment.metaData, contentHash: sha256,
            isOnDemand: attachment.isOnDemand, isPinned: attachment.isPinned, givenUp: attachment.givenUp)
    }

    // MARK: Uploads

    /// Encrypts the content in memory and uploads the ciphertext.
    ///
    /// - Throws: `integrityMismatch` when the content is not what the attachment's ``Attachment/contentHash``
    ///   says (nothing is uploaded).
    public func uploadFile(data: Data, attachment: Attachment) async throws {
        let keyId = try await keys.currentKeyId()
        let key = try await masterKey(keyId, for: attachment)
        let contentSHA256 = FileStreaming.sha256(data)
        try Self.checkContent(contentSHA256, attachment)
        var stream = try EncryptingStream(
            header: try header(for: attachment, contentSHA256: contentSHA256, keyId: keyId, key: key), masterKey: key,
            attachmentId: attachment.id)
        let sealed = Data(try stream.update(data) + (try stream.finish()))
        try await base.uploadFile(
            data: sealed,
            attachment: Self.stored(attachment, size: Int64(sealed.count), sha256: FileStreaming.sha256(sealed)))
    }

    /// Files up to this size are encrypted in memory and uploaded from there; larger ones through a sealed
    /// copy beside the file.
    static let inMemoryUploadLimit: Int64 = 1 << 20

    /// Encrypts the file and uploads the ciphertext: a small file from memory, a larger one through a sealed
    /// copy beside it (one segment in memory), removed afterwards. Progress counts content bytes.
    ///
    /// When the wrapped adapter uploads the file in parts (`S3RemoteStorage` above its multipart
    /// threshold), no copy is made: a first pass seals the content without writing it (the ciphertext's
    /// SHA-256 goes with the upload's start), then each part is sealed again from the content into a file of
    /// its own when it is about to go, and removed after, so the upload takes a few parts of disk instead of
    /// the file's size. Each segment sealed again must have the tag the first pass gave it: content that
    /// changed meanwhile stops the upload with `integrityMismatch` before the part that holds it goes.
    ///
    /// - Throws: `integrityMismatch` when the file is not the content the attachment's
    ///   ``Attachment/contentHash`` says (a file changed after it was saved): nothing is uploaded.
    public func uploadFile(fileURL: URL, attachment: Attachment, progress: @escaping TransferProgressHandler)
        async throws
    {
        let files = SystemFileOperations()
        if let size = try files.info(atPath: fileURL.path)?.size, size <= Self.inMemoryUploadLimit {
            let handle = try files.openForReading(atPath: fileURL.path)
            defer { try? handle.close() }
            let data = try handle.readToEnd() ?? Data()
            try await uploadFile(data: data, attachment: attachment)
            progress(TransferProgress(completedBytes: Int64(data.count), totalBytes: Int64(data.count)))
            return
        }
        if let partwise = base as? any PartwiseUploading, let size = try files.info(atPath: fileURL.path)?.size,
            partwise.uploadsInParts(size: Self.largestCiphertextSize(contentSize: size) ?? size)
        {
            try await uploadInParts(fileURL, of: attachment, to: partwise, progress: progress)
            return
        }
        let sealed = fileURL.deletingLastPathComponent().appendingPathComponent(FileName.uniqueTemporaryName())
        defer { try? files.removeFile(atPath: sealed.path) }
        let (contentSize, sealedSize, sealedSHA256) = try await seal(fileURL, of: attachment, into: sealed)
        try await base.uploadFile(
            fileURL: sealed, attachment: Self.stored(attachment, size: sealedSize, sha256: sealedSHA256)
        ) { sent in
            progress(Self.contentProgress(sent, contentSize: contentSize, storedSize: sealedSize))
        }
    }

    /// Encrypts the file at `fileURL` under the current key into `sealed` (created or truncated; removed again
    /// when this throws), one segment in memory; returns the content's size and the encrypted file's size and
    /// SHA-256.
    ///
    /// - Throws: `keyUnavailable` without the current key; `integrityMismatch` when the file is not the
    ///   content the attachment's ``Attachment/contentHash`` says.
    func seal(_ fileURL: URL, of attachment: Attachment, into sealed: URL) async throws -> (
        contentSize: Int64, sealedSize: Int64, sealedSHA256: String
    ) {
        let result = try await seal(fileURL, of: attachment, writingTo: sealed)
        return (result.contentSize, result.sealedSize, result.sealedSHA256)
    }

    /// ``seal(_:of:into:)``, or with `sealed` `nil` the same pass writing nothing (the encrypted file's size
    /// and SHA-256 only); also returns a stream like the one that sealed it, to make any range of the file
    /// again, and (without `sealed`) the tag of every segment, in order.
    func seal(_ fileURL: URL, of attachment: Attachment, writingTo sealed: URL?) async throws -> (
        contentSize: Int64, sealedSize: Int64, sealedSHA256: String, stream: EncryptingStream, tags: [UInt8]
    ) {
        let files = SystemFileOperations()
        let keyId = try await keys.currentKeyId()
        let key = try await masterKey(keyId, for: attachment)
        var contentSHA256 = attachment.contentHash?.lowercased()
        if contentSHA256 == nil { contentSHA256 = try await files.digest(ofFileAt: fileURL.path).sha256 }
        let header = try header(for: attachment, contentSHA256: contentSHA256 ?? "", keyId: keyId, key: key)
        do {
            let (contentSize, sealedSize, sealedSHA256, readSHA256, tags) = try await onBlockingThread {
                var tags: [UInt8] = []
                let result = try Self.transform(fileURL, into: sealed, hashingInput: true) {
                    (chunk, stream: inout EncryptingStream, emit) in
                    try stream.update(chunk, emit: emit)
                } finish: { (stream: inout EncryptingStream, emit) in
                    try stream.finish(emit: emit)
                    tags = stream.recordedTags ?? []
                } stream: { () throws -> EncryptingStream in
                    var stream = try EncryptingStream(header: header, masterKey: key, attachmentId: attachment.id)
                    if sealed == nil { stream.recordedTags = [] }
                    return stream
                }
                return (result.read, result.written, result.sha256, result.readSHA256, tags)
            }
            // The header was derived from the content's hash: the file read must be that content.
            try Self.checkContent(readSHA256, attachment, expected: contentSHA256)
            return (
                contentSize, sealedSize, sealedSHA256,
                try EncryptingStream(header: header, masterKey: key, attachmentId: attachment.id), tags
            )
        } catch {
            if let sealed { try? files.removeFile(atPath: sealed.path) }
            throw error
        }
    }

    /// Throws `integrityMismatch` unless `sha256`, the hash of the content about to be encrypted, is the
    /// attachment's ``Attachment/contentHash`` (or `expected`), when it has one.
    static func checkContent(_ sha256: String, _ attachment: Attachment, expected: String? = nil) throws {
        guard let recorded = (expected ?? attachment.contentHash)?.lowercased(), FileStreaming.isSHA256(recorded),
            recorded != sha256
        else { return }
        throw AttachmentError(
            code: .integrityMismatch,
            message: "the content to upload as \(String(reflecting: attachment.filename)) has SHA-256 \(sha256), but "
                + "attachment \(String(reflecting: attachment.id)) was saved with \(recorded); nothing was uploaded",
            attachmentId: attachment.id, name: attachment.filename)
    }

    // MARK: Downloads

    /// Downloads the ciphertext and returns the content; throws `integrityMismatch` when it does not decrypt
    /// (or is a plain file ``plaintextReads`` does not accept).
    public func downloadFile(attachment: Attachment) async throws -> Data {
        let sealed = try await base.downloadFile(attachment: Self.stored(attachment))
        if readsPlain(sealed.prefix(304), attachment) {
            try Self.checkPlain(sha256: FileStreaming.sha256(sealed), attachment)
            return sealed
        }
        let header = try Self.header(of: sealed.prefix(304), attachment)
        let key = try await masterKey(header.keyId, for: attachment)
        var stream = DecryptingStream(attachmentId: attachment.id) { _ in key }
        do {
            return Data(try stream.update(sealed) + (try stream.finish()))
        } catch let failure as EncryptedFormat.Failure {
            throw Self.rejected(attachment, failure)
        }
    }

    /// The wrapped adapter's: with ranged reads, an interrupted download resumes (see
    /// ``downloadFile(attachment:into:from:progress:)``).
    public var supportsRangedDownloads: Bool { base.supportsRangedDownloads }

    /// Completes the partial download `destination` (see ``downloadFile(attachment:into:from:progress:)``).
    public func downloadFile(
        attachment: Attachment, appendingTo destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws {
        _ = try await downloadFile(attachment: attachment, into: destination, from: offset, progress: progress)
    }

    /// Downloads the ciphertext into a file beside `destination` and decrypts it into `destination` (one
    /// segment in memory), hashing the content as it is written. A file of 1 MiB or more (or of unknown
    /// size) is decrypted while it arrives when the wrapped adapter reports its progress through the file
    /// (the HTTP adapters do, parallel ranged reads included), so little is left to do when the last byte
    /// comes; the wrapped adapter does not hash the ciphertext, whose every segment authenticates.
    ///
    /// The ciphertext is kept when the download fails (the network dropped, the key is not here yet), under
    /// the name the queue keeps for a partial download's resume data, and the next try fetches only the rest
    /// of it when the wrapped adapter reads ranges (which starts over when the object changed meanwhile); it
    /// is removed once the content was written, or when it does not decrypt. The wrapped adapter's parallel
    /// ranged reads of a big object apply as they do without encryption.
    ///
    /// A large file does not take twice its size on disk: every 64 MiB of content decrypted is flushed to
    /// stable storage and the ciphertext it came from is freed (a hole punched in the kept file, where the
    /// file system can), so the download holds its content and at most about 64 MiB of ciphertext. The
    /// holes also mark how far the content is safe: a try after an interruption keeps the content before
    /// them, whatever `offset` says, and decrypts on from there; content whose ciphertext is still whole is
    /// decrypted again from byte 0. A partial file is never taken for content unless the ciphertext kept
    /// beside it says so.
    public func downloadFile(
        attachment: Attachment, into destination: URL, from offset: Int64,
        progress: @escaping TransferProgressHandler
    ) async throws -> RemoteObjectInfo {
        let files = SystemFileOperations()
        let sealed = destination.deletingLastPathComponent().appendingPathComponent(
            FileName.resumeValidatorName(for: destination.lastPathComponent))
        var keepSealed = true
        defer {
            if !keepSealed {
                try? files.removeFile(atPath: sealed.path)
                // What the wrapped adapter kept to resume the ciphertext goes with it.
                try? files.removeFile(
                    atPath: sealed.deletingLastPathComponent().appendingPathComponent(
                        FileName.resumeValidatorName(for: sealed.lastPathComponent)
                    ).path)
            }
        }
        var fetched = base.supportsRangedDownloads ? (try files.info(atPath: sealed.path)?.size ?? 0) : 0
        // Content kept from an earlier try, whose ciphertext was freed: decrypted on from where it ends.
        let resumed = try await resumption(of: attachment, sealed: sealed, fetched: &fetched, into: destination)
        // The wrapped adapter need not hash the ciphertext (every segment authenticates), and a large file is
        // decrypted as it arrives.
        let tap = DownloadTap(writtenUpTo: fetched, skipsDigest: true)
        // An adapter that offers its bytes as they arrive has a large file decrypted before it reaches the
        // disk, unless the download resumes content kept (which the follower does).
        let sink =
            base is any DownloadSinkAdapter
            ? DecryptingSink(storage: self, attachment: attachment, sealed: sealed, destination: destination) : nil
        // Followed from the start when the row says the file is large (or the content is resumed), else once
        // the object's size shows it; never once the sink took the download (when there is a sink, the first
        // progress report comes after the adapter asked it).
        let following = LockedValue<Task<RemoteObjectInfo?, Never>?>(nil)
        @Sendable func followIfLarge(_ size: Int64?) {
            guard let size, size >= Self.followedDownloadSize else { return }
            following.withLock {
                if $0 == nil, sink?.leaveToFollower() ?? true {
                    $0 = Task {
                        await follow(tap, sealed: sealed, into: destination, attachment: attachment, resumed: resumed)
                    }
                }
            }
        }
        if resumed != nil || sink == nil { followIfLarge(resumed != nil ? Int64.max : attachment.size) }
        // An object larger than any encrypted file of the row's size is stopped as soon as its size shows (as
        // the wrapped adapter refuses a plain object of the wrong size before its body): it does not fill the
        // disk. The transfer runs in a task of its own, which that stop cancels.
        let ceiling = attachment.size.flatMap(Self.largestCiphertextSize)
        let stop = LockedValue<(transfer: Task<RemoteObjectInfo, any Error>?, seen: Int64?)>((nil, nil))
        let transfer = Task {
            try await DownloadTap.$current.withValue(tap) {
                try await DownloadSinks.$current.withValue(sink) {
                    try await base.downloadFile(attachment: Self.stored(attachment), into: sealed, from: fetched) {
                        sent in
                        if let ceiling, max(sent.totalBytes ?? 0, sent.completedBytes) > ceiling {
                            let size = max(sent.totalBytes ?? 0, sent.completedBytes)
                            stop.withLock {
                                $0.seen = $0.seen ?? size
                                return $0.transfer
                            }?.cancel()
                        }
                        if attachment.size == nil || sink != nil {
                            followIfLarge(attachment.size ?? max(sent.totalBytes ?? 0, sent.completedBytes))
                        }
                        // In content bytes: the share of the ciphertext received, of the content's size.
                        guard let contentSize = attachment.size, let storedSize = sent.totalBytes else {
                            return progress(TransferProgress(completedBytes: sent.completedBytes, totalBytes: nil))
                        }
                        progress(Self.contentProgress(sent, contentSize: contentSize, storedSize: storedSize))
                    }
                }
            }
        }
        if stop.withLock({
            $0.transfer = transfer
            return $0.seen != nil
        }) {
            transfer.cancel()
        }
        func oversized() -> AttachmentError? {
            guard let seen = stop.withLock({ $0.seen }), let ceiling else { return nil }
            return AttachmentError(
                code: .integrityMismatch,
                message: "the stored object of attachment \(String(reflecting: attachment.id)) is \(seen) bytes or "
                    + "more, larger than any encrypted file of its \(attachment.size ?? 0) bytes can be "
                    + "(\(ceiling)); the download was stopped", attachmentId: attachment.id, name: attachment.filename)
        }
        do {
            _ = try await withTaskCancellationHandler {
                try await transfer.value
            } onCancel: {
                transfer.cancel()
            }
        } catch {
            tap.finish()
            let oversized = oversized()
            if oversized != nil || (error as? AttachmentError)?.code == .remoteNotFound { keepSealed = false }
            // The sink left the content it decrypted, and the ciphertext file to resume it (see
            // `DecryptingSink.keep(upTo:)`), under the same conditions as the follower.
            if sink?.took == true, !keepSealed || !base.supportsRangedDownloads {
                try? files.removeFile(atPath: destination.path)
            }
            if let follower = following.withLock({ $0 }) {
                follower.cancel()
                _ = await follower.value
                // The content decrypted so far stays for the next try when that try can resume from it (see
                // above): the ciphertext stays too, and the wrapped adapter reads ranges.
                if !keepSealed || !base.supportsRangedDownloads { try? files.removeFile(atPath: destination.path) }
            }
            throw oversized ?? error
        }
        // No progress reports come any more: the follower, if any, is this one.
        let follower = following.withLock { $0 }
        if let sink, sink.took, oversized() == nil {
            tap.finish()
            let content: RemoteObjectInfo?
            do {
                content = try await sink.finish()
            } catch {
                keepSealed = false
                try? files.removeFile(atPath: destination.path)
                throw error
            }
            if let content, let contentSize = content.writtenSize {
                keepSealed = false
                progress(TransferProgress(completedBytes: contentSize, totalBytes: contentSize))
                return content
            }
            // Not decrypted (a plain file, a header it could not read, a key not here): the ciphertext file
            // holds the object, read below as any download's.
        }
        // An adapter that did not stop when cancelled.
        if let oversized = oversized() {
            keepSealed = false
            tap.finish()
            if let follower {
                follower.cancel()
                _ = await follower.value
                try? files.removeFile(atPath: destination.path)
            }
            if sink?.took == true { try? files.removeFile(atPath: destination.path) }
            throw oversized
        }
        if let follower {
            tap.written(upTo: try files.info(atPath: sealed.path)?.size ?? 0)
            tap.finish()
            if let content = await follower.value, let contentSize = content.writtenSize {
                keepSealed = false
                progress(TransferProgress(completedBytes: contentSize, totalBytes: contentSize))
                return content
            }
        }
        // A small file is read once, decrypted in memory and written back into the same file, which is then
        // renamed into place: one file created per download, as without encryption (on ext4 a file created
        // costs more than 64 KiB written, and more still after many were removed).
        if let whole = try Self.contentsIfSmall(sealed) {
            if readsPlain(whole.prefix(304), attachment) {
                keepSealed = false
                let sha256 = FileStreaming.sha256(whole)
                try Self.checkPlain(sha256: sha256, attachment)
                try files.rename(sealed.path, to: destination.path)
                progress(TransferProgress(completedBytes: Int64(whole.count), totalBytes: Int64(whole.count)))
                return RemoteObjectInfo(writtenSize: Int64(whole.count), writtenSHA256: sha256)
            }
            let header: EncryptedFormat.Header
            do {
                header = try Self.header(of: whole.prefix(304), attachment)
            } catch {
                keepSealed = false
                throw error
            }
            // Without the key, the ciphertext waits here for it.
            let key = try await masterKey(header.keyId, for: attachment)
            keepSealed = false
            var stream = DecryptingStream(attachmentId: attachment.id) { _ in key }
            let content: Data
            do {
                content = Data(try stream.update(whole) + (try stream.finish()))
            } catch let failure as EncryptedFormat.Failure {
                throw Self.rejected(attachment, failure)
            }
            // Moved before it is overwritten: a crash in between leaves ciphertext under the partial download's
            // name, which the queue removes before it downloads again (this adapter reads no ranges), never
            // content under the name of the ciphertext kept to resume.
            try files.rename(sealed.path, to: destination.path)
            let output = try files.openForWriting(atPath: destination.path, at: nil)
            defer { output.close() }
            try output.write(content)
            progress(TransferProgress(completedBytes: Int64(content.count), totalBytes: Int64(content.count)))
            return RemoteObjectInfo(writtenSize: Int64(content.count), writtenSHA256: FileStreaming.sha256(content))
        }
        let start = try Self.start(of: sealed)
        if readsPlain(start, attachment) {
            keepSealed = false
            let (size, sha256) = try await files.digest(ofFileAt: sealed.path)
            try Self.checkPlain(sha256: sha256, attachment)
            try files.rename(sealed.path, to: destination.path)
            progress(TransferProgress(completedBytes: size, totalBytes: size))
            return RemoteObjectInfo(writtenSize: size, writtenSHA256: sha256)
        }
        let header: EncryptedFormat.Header
        do {
            header = try Self.header(of: start, attachment)
        } catch {
            keepSealed = false
            throw error
        }
        // Without the key, the ciphertext waits here for it.
        let key = try await masterKey(header.keyId, for: attachment)
        keepSealed = false
        let content = try await Self.decrypt(sealed, of: attachment, key: key, into: destination)
        if let contentSize = content.writtenSize {
            progress(TransferProgress(completedBytes: contentSize, totalBytes: contentSize))
        }
        return content
    }

    /// The largest encrypted file `contentSize` bytes of content can make (the smallest segments a reader
    /// accepts, the longest key id); `nil` for a negative size.
    static func largestCiphertextSize(contentSize: Int64) -> Int64? {
        guard contentSize >= 0 else { return nil }
        let segments = contentSize / Int64(EncryptedFormat.segmentSizes.lowerBound) + 1
        // At most 2^53 segments: their tags cannot overflow.
        return contentSize.addingClamped(segments * Int64(EncryptedFormat.tagSize)).addingClamped(48 + 255)
    }

    /// Stored files up to this size are decrypted in memory once they are downloaded: the ciphertext of any
    /// file too small to be followed (see ``followedDownloadSize``).
    static let inMemoryDownloadLimit: Int64 = followedDownloadSize + (64 << 10)

    /// The whole file when it holds at most ``inMemoryDownloadLimit`` bytes, else `nil`.
    static func contentsIfSmall(_ file: URL) throws -> Data? {
        let files = SystemFileOperations()
        guard let size = try files.info(atPath: file.path)?.size, size <= inMemoryDownloadLimit else { return nil }
        let handle = try files.openForReading(atPath: file.path)
        defer { try? handle.close() }
        // Read to its end, whatever the size said: a file that grew since is not taken for a shorter one.
        let whole = try handle.read(upToCount: Int(inMemoryDownloadLimit) + 1) ?? Data()
        return whole.count <= inMemoryDownloadLimit ? whole : nil
    }

    /// The first 304 bytes of the file (all of it when shorter): enough for any header.
    static func start(of file: URL) throws -> Data {
        let head = try SystemFileOperations().openForReading(atPath: file.path)
        defer { try? head.close() }
        return try head.read(upToCount: 304) ?? Data()
    }

    /// Decrypts the encrypted file `sealed` into `destination` (created or truncated; removed when the file
    /// does not decrypt), one segment in memory, hashing the content as it is written.
    static func decrypt(_ sealed: URL, of attachment: Attachment, key: SymmetricKey, into destination: URL)
        async throws -> RemoteObjectInfo
    {
        do {
            let (_, contentSize, contentSHA256) = try await onBlockingThread {
                try Self.transform(sealed, into: destination) { chunk, stream, emit in
                    try stream.update(chunk, emit: emit)
                } finish: { stream, emit in
                    try stream.finish(emit: emit)
                } stream: {
                    DecryptingStream(attachmentId: attachment.id) { _ in key }
                }
            }
            return RemoteObjectInfo(writtenSize: contentSize, writtenSHA256: contentSHA256)
        } catch let failure as EncryptedFormat.Failure {
            try? SystemFileOperations().removeFile(atPath: destination.path)
            throw Self.rejected(attachment, failure)
        }
    }

    /// Deletes the stored ciphertext.
    public func deleteFile(attachment: Attachment) async throws {
        try await base.deleteFile(attachment: Self.stored(attachment))
    }

    /// Lets the wrapped adapter forget an unfinished upload of the ciphertext.
    public func discardPartialUpload(attachment: Attachment) async throws {
        try await base.discardPartialUpload(attachment: Self.stored(attachment))
    }

    // MARK: Helpers

    /// Whether a stored object starting with `start` (its first 304 bytes, or all of it) is read as a plain
    /// file: it does not start like an encrypted file (another magic, or it ends before a header could) and
    /// ``plaintextReads`` accepts a plain file for the attachment. One that starts like an encrypted file
    /// is always read as one.
    func readsPlain(_ start: Data, _ attachment: Attachment) -> Bool {
        guard plaintextReads.accepts(attachment) else { return false }
        do {
            return try EncryptedFormat.Header.parse(Array(start)) == nil
        } catch let failure as EncryptedFormat.Failure {
            return failure.kind == .notEncrypted
        } catch {
            return false
        }
    }

    /// Refuses a plain file whose SHA-256 is not the one the attachment's row carries.
    static func checkPlain(sha256: String, _ attachment: Attachment) throws {
        guard let expected = attachment.contentHash?.lowercased(), expected != sha256 else { return }
        throw rejected(
            attachment,
            EncryptedFormat.Failure(
                kind: .notEncrypted, detail: "it is a plain file whose SHA-256 \(sha256) is not the row's \(expected)"))
    }

    /// The header at the start of a stored object; throws `integrityMismatch` when there is none.
    static func header(of start: Data, _ attachment: Attachment) throws -> EncryptedFormat.Header {
        do {
            guard let header = try EncryptedFormat.Header.parse(Array(start)) else {
                throw EncryptedFormat.Failure(kind: .truncated, detail: "the object ends inside its header")
            }
            return header
        } catch let failure as EncryptedFormat.Failure {
            throw rejected(attachment, failure)
        }
    }

    static func rejected(_ attachment: Attachment, _ failure: EncryptedFormat.Failure) -> AttachmentError {
        AttachmentError(
            code: .integrityMismatch,
            message: "the stored object of attachment \(String(reflecting: attachment.id)) does not decrypt: "
                + "\(failure)", attachmentId: attachment.id, name: attachment.filename, underlying: failure)
    }

    static func contentProgress(_ sent: TransferProgress, contentSize: Int64, storedSize: Int64) -> TransferProgress {
        guard storedSize > 0 else { return TransferProgress(completedBytes: 0, totalBytes: contentSize) }
        let share = Double(sent.completedBytes) / Double(storedSize)
        return TransferProgress(
            completedBytes: min(contentSize, Int64(share * Double(contentSize))), totalBytes: contentSize)
    }

    /// The emitted bytes a stream hands on: its output, given to a ``transform(_:into:hashing:update:finish:stream:)``.
    typealias Emit = (UnsafeRawBufferPointer) throws -> Void

    /// Streams the file at `source` through a stream into `target` (created or truncated; not flushed: an
    /// upload's sealed copy is removed after the upload, and the queue flushes a download's file itself),
    /// 1 MiB at a time; returns the sizes read and written and, with `hashing`, the SHA-256 of what was
    /// written.
    static func transform<Stream>(
        _ source: URL, into target: URL, hashing: Bool = true,
        update: (UnsafeRawBufferPointer, inout Stream, Emit) throws -> Void,
        finish: (inout Stream, Emit) throws -> Void,
        stream makeStream: () throws -> Stream
    ) throws -> (read: Int64, written: Int64, sha256: String) {
        let result = try transform(
            source, into: target, hashing: hashing, hashingInput: false, update: update, finish: finish,
            stream: makeStream)
        return (result.read, result.written, result.sha256)
    }

    /// ``transform(_:into:hashing:update:finish:stream:)`` that also returns, with `hashingInput`, the SHA-256
    /// of what was read.
    ///
    /// The file is read into one buffer and the stream's output gathered in another, both reused: no memory
    /// is allocated per chunk, and the output is written (and hashed) 1 MiB at a time.
    static func transform<Stream>(
        _ source: URL, into target: URL?, hashing: Bool = true, hashingInput: Bool,
        update: (UnsafeRawBufferPointer, inout Stream, Emit) throws -> Void,
        finish: (inout Stream, Emit) throws -> Void,
        stream makeStream: () throws -> Stream
    ) throws -> (read: Int64, written: Int64, sha256: String, readSHA256: String) {
        let chunkSize = 1 << 20
        var stream = try makeStream()
        let files = SystemFileOperations()
        let input = try files.openForReading(atPath: source.path)
        defer { try? input.close() }
        // Without a target, the output is only hashed.
        let output = try target.map { try files.openForWriting(atPath: $0.path, at: nil) }
        defer { output?.close() }
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: chunkSize, alignment: 64)
        defer { buffer.deallocate() }
        var gathered: [UInt8] = []
        gathered.reserveCapacity(chunkSize + (64 << 10))
        var hasher = SHA256()
        let inputHasher = hashingInput ? ConcurrentHasher() : nil
        var read: Int64 = 0
        var written: Int64 = 0
        func flush() throws {
            guard !gathered.isEmpty else { return }
            try gathered.withUnsafeBytes { bytes in
                if hashing { hasher.update(bufferPointer: bytes) }
                try output?.write(contentsOf: bytes)
            }
            written += Int64(gathered.count)
            gathered.removeAll(keepingCapacity: true)
        }
        func emit(_ bytes: UnsafeRawBufferPointer) throws {
            gathered.append(contentsOf: bytes)
            if gathered.count >= chunkSize { try flush() }
        }
        while true {
            let count: Int
            do {
                count = try readFully(input.fileDescriptor, into: buffer)
            } catch {
                throw AttachmentError(
                    code: .fileSystem, message: "cannot read \(source.path): \(error)", path: source.path,
                    underlying: error)
            }
            guard count > 0 else { break }
            let chunk = UnsafeRawBufferPointer(rebasing: buffer[..<count])
            read += Int64(count)
            if let inputHasher {
                // Hashed on another thread while the stream reads the same bytes; the buffer is not reused
                // before the hash is done.
                inputHasher.update(chunk)
                defer { inputHasher.wait() }
                try update(chunk, &stream, emit)
            } else {
                try update(chunk, &stream, emit)
            }
            if count < chunkSize { break }
        }
        try finish(&stream, emit)
        try flush()
        return (
            read, written, hashing ? FileStreaming.hex(hasher.finalize()) : "",
            inputHasher?.finalize() ?? ""
        )
    }
}

/// A SHA-256 computed on a thread of its own, one block of bytes at a time, so that a pass over a file can
/// hash what it reads while it does something else with the same bytes.
final class ConcurrentHasher: @unchecked Sendable {
    // Why `@unchecked Sendable` is safe: `hasher` is only touched by the jobs of `queue` (serial, so one at a
    // time) and by `finalize()`, which first waits for every job; a job's bytes are only read, and the caller
    // keeps them alive and unchanged until its `wait()` returns (see `update(_:)`). The group's `wait()` orders
    // everything a job did before what follows it.
    private var hasher = SHA256()
    private let queue = DispatchQueue(label: "AttachmentSync.ConcurrentHasher")
    private let group = DispatchGroup()

    /// Starts hashing `bytes`, which must stay allocated and unchanged until ``wait()`` returns.
    func update(_ bytes: UnsafeRawBufferPointer) {
        let block = BorrowedBytes(bytes: bytes)
        queue.async(group: group) { self.hasher.update(bufferPointer: block.bytes) }
    }

    /// Returns once every block given so far is hashed.
    func wait() { group.wait() }

    /// The SHA-256 (lowercase hex) of every block, once they are hashed.
    func finalize() -> String {
        wait()
        return FileStreaming.hex(hasher.finalize())
    }

    /// Bytes lent to the hashing thread. `@unchecked Sendable`: only read there, while the lender waits for
    /// the job (see ``ConcurrentHasher/update(_:)``).
    private struct BorrowedBytes: @unchecked Sendable {
        let bytes: UnsafeRawBufferPointer
    }
}
