import Crypto
import Foundation

/// Seals content into the encrypted format as it streams: give it the content in chunks of any size, it
/// returns the encrypted bytes ready so far; ``finish()`` returns the rest. At most one segment is held.
/// Every segment is bound to `attachmentId`, which a reader must be given to open the file.
struct EncryptingStream {
    let header: EncryptedFormat.Header
    private let key: SymmetricKey
    private let additionalData: [UInt8]
    private var pending: [UInt8] = []
    private var index: UInt32 = 0
    private var headerWritten = false
    private var finished = false
    /// When not `nil`, every segment's tag is appended here as it is sealed (16 bytes each, in order): what a
    /// later pass that seals segments again compares its own with, to tell the content did not change.
    var recordedTags: [UInt8]?

    init(header: EncryptedFormat.Header, masterKey: SymmetricKey, attachmentId: String) throws {
        try header.validate()
        self.header = header
        key = EncryptedFormat.fileKey(master: masterKey, header: header)
        additionalData = EncryptedFormat.additionalData(header, attachmentId: attachmentId)
        pending.reserveCapacity(header.segmentSize)
    }

    /// A whole segment's length, sealed.
    private var segmentLength: Int { header.segmentSize + EncryptedFormat.tagSize }

    /// The encrypted bytes for `content` (the header first, on the first call): every whole segment it
    /// completes.
    mutating func update(_ content: some Collection<UInt8>) throws -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(header.length + (pending.count + content.count) / header.segmentSize * segmentLength)
        try Self.withBytes(content) { bytes in try update(bytes) { out.append(contentsOf: $0) } }
        return out
    }

    /// Hands `emit` the encrypted bytes for `content` as they are made (the header first, on the first call;
    /// then each segment `content` completes, its ciphertext and its tag), without copying them. A whole
    /// segment of `content` is sealed from where it is; only a segment's start or end is held.
    mutating func update(_ content: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard !finished else { throw Self.usedAfterFinish }
        try emitHeader(emit)
        var rest = content[...]
        if !pending.isEmpty {
            let room = header.segmentSize - pending.count
            pending += rest.prefix(room)
            rest = rest.dropFirst(room)
            guard pending.count == header.segmentSize else { return }
            try sealPending(last: false, emit: emit)
            pending.removeAll(keepingCapacity: true)
        }
        while rest.count >= header.segmentSize {
            try seal(UnsafeRawBufferPointer(rebasing: rest.prefix(header.segmentSize)), last: false, emit: emit)
            rest = rest.dropFirst(header.segmentSize)
        }
        pending += rest
    }

    /// The last segment (holding what is left, maybe nothing).
    mutating func finish() throws -> [UInt8] {
        var out: [UInt8] = []
        try finish { out.append(contentsOf: $0) }
        return out
    }

    /// Hands `emit` the last segment (holding what is left, maybe nothing), and the header first when no
    /// content came.
    mutating func finish(emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard !finished else { throw Self.usedAfterFinish }
        try emitHeader(emit)
        try sealPending(last: true, emit: emit)
        pending.removeAll()
        finished = true
    }

    /// Runs `body` with `bytes` as contiguous memory (copied only when the collection is not).
    static func withBytes<Result>(
        _ bytes: some Collection<UInt8>, _ body: (UnsafeRawBufferPointer) throws -> Result
    ) throws -> Result {
        if let result = try bytes.withContiguousStorageIfAvailable({ try body(UnsafeRawBufferPointer($0)) }) {
            return result
        }
        return try Array(bytes).withUnsafeBytes(body)
    }

    /// A stream used after its last segment was sealed: a mistake of the caller's, reported rather than
    /// sealing a segment after the last.
    static let usedAfterFinish = EncryptedFormat.Failure(
        kind: .trailingBytes, detail: "the stream was used after its last segment was sealed")

    private mutating func emitHeader(_ emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard !headerWritten else { return }
        headerWritten = true
        try header.bytes.withUnsafeBytes(emit)
    }

    // Sealing reads the content and the stream's state, then the stream moves on: the read is over before
    // the stream changes, so the content may be the stream's own `pending` (no overlapping access).

    /// Seals what `pending` holds as the next segment.
    private mutating func sealPending(last: Bool, emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        try emitSegment(try pending.withUnsafeBytes { try sealed($0, last: last) }, emit: emit)
    }

    private mutating func seal(
        _ content: UnsafeRawBufferPointer, last: Bool, emit: (UnsafeRawBufferPointer) throws -> Void
    ) throws {
        try emitSegment(try sealed(content, last: last), emit: emit)
    }

    /// `content` sealed as the next segment.
    private func sealed(_ content: UnsafeRawBufferPointer, last: Bool) throws -> AES.GCM.SealedBox {
        try sealed(content, index: index, last: last)
    }

    /// `content` sealed as segment `index` of this file (the last one when `last`): what the stream emits
    /// for that segment, for a writer that makes any range of the file on its own (see
    /// `EncryptedRemoteStorage.SealedParts`).
    func sealed(_ content: UnsafeRawBufferPointer, index: UInt32, last: Bool) throws -> AES.GCM.SealedBox {
        guard index < UInt32.max else {
            throw EncryptedFormat.Failure(kind: .badHeader, detail: "the content is too long for one file")
        }
        return try AES.GCM.seal(
            content, using: key, nonce: EncryptedFormat.nonce(header, index: index, last: last),
            authenticating: additionalData)
    }

    private mutating func emitSegment(_ box: AES.GCM.SealedBox, emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        index += 1
        recordedTags?.append(contentsOf: box.tag)
        try box.ciphertext.withUnsafeBytes(emit)
        try box.tag.withUnsafeBytes(emit)
    }
}

/// Opens the encrypted format as it streams: give it the encrypted bytes in chunks of any size, it returns
/// the content of every segment that authenticated; ``finish()`` throws unless the last segment came and
/// nothing followed it. Content is handed out only once its segment authenticated, so nothing unauthentic
/// is ever returned; a caller that must not act on a prefix of a file cut short waits for ``finish()``.
/// It opens only a file written for `attachmentId`: another attachment's file fails at its first segment.
struct DecryptingStream {
    /// The header, once read.
    private(set) var header: EncryptedFormat.Header?
    private let keyFor: (String) throws -> SymmetricKey
    private let attachmentId: String
    private var key: SymmetricKey?
    private var additionalData: [UInt8] = []
    private var pending: [UInt8] = []
    private var index: UInt32 = 0
    private var sawLast = false

    /// Opens the file of attachment `attachmentId`; `keyFor` returns the master key of a key id (it throws
    /// when it has none).
    init(attachmentId: String, keyFor: @escaping (String) throws -> SymmetricKey) {
        self.attachmentId = attachmentId
        self.keyFor = keyFor
    }

    /// Starts at segment `index` of a file with `header` (a ranged read: the caller positions the bytes at
    /// that segment's start).
    init(
        header: EncryptedFormat.Header, masterKey: SymmetricKey, attachmentId: String, fromSegment index: UInt32
    ) throws {
        try header.validate()
        keyFor = { _ in masterKey }
        self.attachmentId = attachmentId
        self.header = header
        key = EncryptedFormat.fileKey(master: masterKey, header: header)
        additionalData = EncryptedFormat.additionalData(header, attachmentId: attachmentId)
        self.index = index
    }

    /// The content of every segment `bytes` completes that authenticated.
    mutating func update(_ bytes: some Collection<UInt8>) throws -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(pending.count + bytes.count)
        try EncryptingStream.withBytes(bytes) { raw in try update(raw) { out.append(contentsOf: $0) } }
        return out
    }

    /// Hands `emit` the content of every segment `bytes` completes, once it authenticated. A whole segment of
    /// `bytes` is opened from where it is; only the header and a segment's start or end are held.
    mutating func update(_ bytes: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard header != nil else {
            pending.append(contentsOf: bytes)
            guard let parsed = try EncryptedFormat.Header.parse(pending) else { return }
            header = parsed
            key = EncryptedFormat.fileKey(master: try keyFor(parsed.keyId), header: parsed)
            additionalData = EncryptedFormat.additionalData(parsed, attachmentId: attachmentId)
            let held = Array(pending[parsed.length...])
            pending.removeAll(keepingCapacity: true)
            try held.withUnsafeBytes { try consume($0, emit: emit) }
            return
        }
        try consume(bytes, emit: emit)
    }

    /// Opens the whole segments of what `pending` holds followed by `bytes`, and holds the rest.
    private mutating func consume(_ bytes: UnsafeRawBufferPointer, emit: (UnsafeRawBufferPointer) throws -> Void)
        throws
    {
        guard let header else { return }
        // A whole-size segment is never the last: it opens as soon as it is here.
        let whole = header.segmentSize + EncryptedFormat.tagSize
        var rest = bytes[...]
        if sawLast, !rest.isEmpty {
            throw EncryptedFormat.Failure(kind: .trailingBytes, detail: "bytes follow the last segment")
        }
        if !pending.isEmpty {
            let room = whole - pending.count
            pending += rest.prefix(room)
            rest = rest.dropFirst(room)
            guard pending.count == whole else { return }
            try accept(try pending.withUnsafeBytes { try opened($0, last: false) }, last: false, emit: emit)
            pending.removeAll(keepingCapacity: true)
        }
        while rest.count >= whole {
            try accept(
                try opened(UnsafeRawBufferPointer(rebasing: rest.prefix(whole)), last: false), last: false, emit: emit)
            rest = rest.dropFirst(whole)
        }
        pending += rest
    }

    /// The content of the last segment; throws when the file was cut short or extended.
    mutating func finish() throws -> [UInt8] {
        var out: [UInt8] = []
        try finish { out.append(contentsOf: $0) }
        return out
    }

    /// Hands `emit` the content of the last segment; throws when the file was cut short or extended.
    mutating func finish(emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        guard header != nil else {
            throw EncryptedFormat.Failure(kind: .truncated, detail: "the content ends inside the header")
        }
        guard !sawLast else {
            guard pending.isEmpty else {
                throw EncryptedFormat.Failure(kind: .trailingBytes, detail: "bytes follow the last segment")
            }
            return
        }
        guard pending.count >= EncryptedFormat.tagSize else {
            throw EncryptedFormat.Failure(kind: .truncated, detail: "the content ends before its last segment")
        }
        try accept(try pending.withUnsafeBytes { try opened($0, last: true) }, last: true, emit: emit)
        pending = []
    }

    // Opening reads the segment and the stream's state, then the stream moves on (`accept`): the read is
    // over before the stream changes, so the segment may be the stream's own `pending`.

    /// The content of `segment`, opened as the next segment.
    private func opened(_ segment: UnsafeRawBufferPointer, last: Bool) throws -> Data {
        guard let header, let key else { return Data() }
        return try EncryptedFormat.open(
            segment, index: index, last: last, header: header, fileKey: key, additionalData: additionalData)
    }

    /// Moves past a segment that opened to `content`, and hands the content on.
    private mutating func accept(_ content: Data, last: Bool, emit: (UnsafeRawBufferPointer) throws -> Void) throws {
        index += 1
        if last { sawLast = true }
        try content.withUnsafeBytes(emit)
    }
}
