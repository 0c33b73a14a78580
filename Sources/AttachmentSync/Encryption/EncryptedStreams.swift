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
        guard !finished else { throw Self.usedAfterFinish }
        var out = takeHeader()
        out.reserveCapacity(out.count + (pending.count + content.count) / header.segmentSize * segmentLength)
        var rest = content[...]
        while !rest.isEmpty {
            let room = header.segmentSize - pending.count
            pending += rest.prefix(room)
            rest = rest.dropFirst(room)
            if pending.count == header.segmentSize {
                out += try seal(last: false)
            }
        }
        return out
    }

    /// The last segment (holding what is left, maybe nothing).
    mutating func finish() throws -> [UInt8] {
        guard !finished else { throw Self.usedAfterFinish }
        var out = takeHeader()
        out += try seal(last: true)
        finished = true
        return out
    }

    /// A stream used after its last segment was sealed: a mistake of the caller's, reported rather than
    /// sealing a segment after the last.
    static let usedAfterFinish = EncryptedFormat.Failure(
        kind: .trailingBytes, detail: "the stream was used after its last segment was sealed")

    private mutating func takeHeader() -> [UInt8] {
        guard !headerWritten else { return [] }
        headerWritten = true
        return header.bytes
    }

    private mutating func seal(last: Bool) throws -> [UInt8] {
        guard index < UInt32.max else {
            throw EncryptedFormat.Failure(kind: .badHeader, detail: "the content is too long for one file")
        }
        let box = try AES.GCM.seal(
            pending, using: key, nonce: EncryptedFormat.nonce(header, index: index, last: last),
            authenticating: additionalData)
        index += 1
        pending.removeAll(keepingCapacity: true)
        var sealed = Array(box.ciphertext)
        sealed.append(contentsOf: box.tag)
        return sealed
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

    mutating func update(_ bytes: some Collection<UInt8>) throws -> [UInt8] {
        pending.append(contentsOf: bytes)
        var out: [UInt8] = []
        // Where the bytes not consumed yet begin: the consumed ones are dropped once, at the end.
        var start = 0
        defer { pending.removeFirst(min(start, pending.count)) }
        if header == nil {
            guard let parsed = try EncryptedFormat.Header.parse(pending) else { return [] }
            header = parsed
            key = EncryptedFormat.fileKey(master: try keyFor(parsed.keyId), header: parsed)
            additionalData = EncryptedFormat.additionalData(parsed, attachmentId: attachmentId)
            start = parsed.length
        }
        guard let header else { return [] }
        let whole = header.segmentSize + EncryptedFormat.tagSize
        out.reserveCapacity((pending.count - start) / whole * header.segmentSize)
        // A whole-size segment is never the last: it opens as soon as it is here.
        while pending.count - start >= whole {
            if sawLast {
                throw EncryptedFormat.Failure(kind: .trailingBytes, detail: "bytes follow the last segment")
            }
            out += try open(pending[start..<(start + whole)], last: false)
            start += whole
        }
        if sawLast, pending.count > start {
            throw EncryptedFormat.Failure(kind: .trailingBytes, detail: "bytes follow the last segment")
        }
        return out
    }

    /// The content of the last segment; throws when the file was cut short or extended.
    mutating func finish() throws -> [UInt8] {
        guard header != nil else {
            throw EncryptedFormat.Failure(kind: .truncated, detail: "the content ends inside the header")
        }
        guard !sawLast else {
            guard pending.isEmpty else {
                throw EncryptedFormat.Failure(kind: .trailingBytes, detail: "bytes follow the last segment")
            }
            return []
        }
        guard pending.count >= EncryptedFormat.tagSize else {
            throw EncryptedFormat.Failure(kind: .truncated, detail: "the content ends before its last segment")
        }
        let out = try open(pending[...], last: true)
        pending = []
        return out
    }

    private mutating func open(_ segment: ArraySlice<UInt8>, last: Bool) throws -> [UInt8] {
        guard let header, let key else { return [] }
        let tagStart = segment.endIndex - EncryptedFormat.tagSize
        do {
            let box = try AES.GCM.SealedBox(
                nonce: EncryptedFormat.nonce(header, index: index, last: last), ciphertext: segment[..<tagStart],
                tag: segment[tagStart...])
            let content = try AES.GCM.open(box, using: key, authenticating: additionalData)
            index += 1
            if last { sawLast = true }
            return Array(content)
        } catch {
            // Changed, moved, from another file or another attachment's, the wrong key, or not the last
            // segment although the content ends there (cut short): the same answer, nothing opened.
            throw EncryptedFormat.Failure(
                kind: .segmentRejected,
                detail: "segment \(index) does not authenticate\(last ? " as the last one" : "")")
        }
    }
}
