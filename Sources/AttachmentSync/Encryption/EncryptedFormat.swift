import Crypto
import Foundation

/// Version 1 of the encrypted attachment format: a header, then the content in segments sealed with
/// AES-256-GCM, each bound to the header, to the attachment's id, to its index and to whether it is the last. The DocC article
/// "Encrypted attachment format" is the specification; this is its one Swift implementation (the tests
/// hold a second, in Python, written from the article).
///
/// ```
/// header:  "ASE" | version 1 | segment size (u32, big-endian) | key id length (u8) | key id (UTF-8)
///          | salt (32 bytes) | nonce prefix (7 bytes)
/// file key = HKDF-SHA256(master key, salt, info: "AttachmentSync encrypted attachment v1", 32 bytes)
/// segment i = AES-256-GCM(file key, nonce: prefix | i (u32, big-endian) | last (0 or 1),
///             additional data: the header's bytes | the attachment's id (UTF-8)) → ciphertext | 16-byte tag
/// ```
///
/// Every segment but the last holds exactly `segment size` bytes of content; the last holds fewer (an empty
/// one follows content whose size is a multiple of the segment size, the empty content included), so a
/// segment's length says whether it is the last and no reader needs to look ahead. The attachment's id is
/// not stored: a reader is told which attachment it reads, so a storage that serves one attachment's object
/// as another's (both under the same key) is caught by the first segment.
enum EncryptedFormat {
    static let magic: [UInt8] = Array("ASE".utf8)
    static let version: UInt8 = 1
    /// The segment size writers use: 64 KiB of content.
    static let defaultSegmentSize = 65_536
    /// The segment sizes a reader accepts.
    static let segmentSizes = 1_024...16_777_216
    static let tagSize = 16
    static let saltSize = 32
    static let noncePrefixSize = 7
    static let keyInfo = Data("AttachmentSync encrypted attachment v1".utf8)

    /// Why bytes are not an encrypted attachment this format can open.
    struct Failure: Error, Equatable, CustomStringConvertible {
        enum Kind: String, Equatable, Sendable {
            /// Not this format (no magic), or a version this reader does not know.
            case notEncrypted, unsupportedVersion
            /// The header is malformed (a segment size or key id out of range, too short).
            case badHeader
            /// A segment failed authentication: changed, moved, from another file, or the wrong key.
            case segmentRejected
            /// The content ends before its last segment (truncated).
            case truncated
            /// Bytes follow the last segment.
            case trailingBytes
        }

        var kind: Kind
        var detail: String
        var description: String { "\(kind.rawValue): \(detail)" }
    }

    /// A file's header.
    struct Header: Equatable, Sendable {
        var keyId: String
        var segmentSize: Int
        var salt: [UInt8]
        var noncePrefix: [UInt8]

        /// A header for a new file: fresh random salt and nonce prefix.
        static func fresh(keyId: String, segmentSize: Int = defaultSegmentSize) throws -> Header {
            var generator = SystemRandomNumberGenerator()
            let header = Header(
                keyId: keyId, segmentSize: segmentSize,
                salt: (0..<saltSize).map { _ in UInt8.random(in: 0...255, using: &generator) },
                noncePrefix: (0..<noncePrefixSize).map { _ in UInt8.random(in: 0...255, using: &generator) })
            try header.validate()
            return header
        }

        func validate() throws {
            let idLength = keyId.utf8.count
            guard (1...255).contains(idLength) else {
                throw Failure(kind: .badHeader, detail: "a key id is 1 to 255 bytes of UTF-8, not \(idLength)")
            }
            guard segmentSizes.contains(segmentSize) else {
                throw Failure(kind: .badHeader, detail: "segment size \(segmentSize) is out of range")
            }
            guard salt.count == saltSize, noncePrefix.count == noncePrefixSize else {
                throw Failure(kind: .badHeader, detail: "the salt or nonce prefix has the wrong length")
            }
        }

        /// The header's bytes, which every segment authenticates.
        var bytes: [UInt8] {
            var out = magic
            out.append(version)
            out += Self.bigEndian(UInt32(segmentSize))
            out.append(UInt8(keyId.utf8.count))
            out += Array(keyId.utf8)
            out += salt
            out += noncePrefix
            return out
        }

        var length: Int { 48 + keyId.utf8.count }

        /// Reads a header from the start of `bytes`: `nil` when more bytes are needed to tell.
        static func parse(_ bytes: some RandomAccessCollection<UInt8>) throws -> Header? {
            let data = Array(bytes.prefix(9))
            if data.count < 4 {
                guard data.elementsEqual(magic.prefix(data.count)) else {
                    throw Failure(kind: .notEncrypted, detail: "the content does not start with the format's magic")
                }
                return nil
            }
            guard data.prefix(3).elementsEqual(magic) else {
                throw Failure(kind: .notEncrypted, detail: "the content does not start with the format's magic")
            }
            guard data[3] == version else {
                throw Failure(kind: .unsupportedVersion, detail: "format version \(data[3]) is not known")
            }
            guard data.count == 9 else { return nil }
            let segmentSize = Int(data[4]) << 24 | Int(data[5]) << 16 | Int(data[6]) << 8 | Int(data[7])
            let idLength = Int(data[8])
            let total = 48 + idLength
            guard bytes.count >= total else { return nil }
            let all = Array(bytes.prefix(total))
            guard let keyId = String(bytes: all[9..<(9 + idLength)], encoding: .utf8) else {
                throw Failure(kind: .badHeader, detail: "the key id is not UTF-8")
            }
            let header = Header(
                keyId: keyId, segmentSize: segmentSize, salt: Array(all[(9 + idLength)..<(41 + idLength)]),
                noncePrefix: Array(all[(41 + idLength)..<total]))
            try header.validate()
            return header
        }

        static func bigEndian(_ value: UInt32) -> [UInt8] {
            [
                UInt8(value >> 24), UInt8(truncatingIfNeeded: value >> 16), UInt8(truncatingIfNeeded: value >> 8),
                UInt8(truncatingIfNeeded: value),
            ]
        }
    }

    /// What every segment of a file authenticates besides its content: the header's bytes, then the
    /// attachment's id in UTF-8 (the header's length is its own, so the two cannot run into each other).
    static func additionalData(_ header: Header, attachmentId: String) -> [UInt8] {
        header.bytes + Array(attachmentId.utf8)
    }

    /// The key of one file, from the master key its header names.
    static func fileKey(master: SymmetricKey, header: Header) -> SymmetricKey {
        HKDF<SHA256>.deriveKey(
            inputKeyMaterial: master, salt: header.salt, info: keyInfo, outputByteCount: 32)
    }

    /// The nonce of segment `index`.
    static func nonce(_ header: Header, index: UInt32, last: Bool) throws -> AES.GCM.Nonce {
        try AES.GCM.Nonce(data: header.noncePrefix + Header.bigEndian(index) + [last ? 1 : 0])
    }

    /// The content of segment `index` of a file with `header`, whose ciphertext and tag are `segment`, opened
    /// with the file's key; throws `segmentRejected` when it does not authenticate (changed, moved, from
    /// another file or another attachment's, the wrong key, or not the last segment although the content
    /// ends there: the same answer, nothing opened).
    static func open(
        _ segment: UnsafeRawBufferPointer, index: UInt32, last: Bool, header: Header, fileKey: SymmetricKey,
        additionalData: [UInt8]
    ) throws -> Data {
        let tagStart = segment.count - tagSize
        do {
            let box = try AES.GCM.SealedBox(
                nonce: nonce(header, index: index, last: last),
                ciphertext: UnsafeRawBufferPointer(rebasing: segment[..<tagStart]),
                tag: UnsafeRawBufferPointer(rebasing: segment[tagStart...]))
            return try AES.GCM.open(box, using: fileKey, authenticating: additionalData)
        } catch {
            throw Failure(
                kind: .segmentRejected,
                detail: "segment \(index) does not authenticate\(last ? " as the last one" : "")")
        }
    }

    /// The size of the encrypted file for `plaintextSize` bytes of content.
    static func ciphertextSize(plaintextSize: Int64, header: Header) -> Int64 {
        let segments = plaintextSize / Int64(header.segmentSize) + 1
        return Int64(header.length) + plaintextSize + segments * Int64(tagSize)
    }

    /// Whether a stored file of `storedSize` bytes can be an encrypted file of `contentSize` bytes of content
    /// written in `segmentSize`-byte segments, with a key id of any allowed length: what can be checked
    /// without the keys or the file's bytes.
    static func isCiphertextSize(
        _ storedSize: Int64, contentSize: Int64, segmentSize: Int = defaultSegmentSize
    ) -> Bool {
        guard contentSize >= 0 else { return false }
        let segments = contentSize / Int64(segmentSize) + 1
        let keyIdLength = storedSize - contentSize - segments * Int64(tagSize) - 48
        return (1...255).contains(keyIdLength)
    }

    /// The size of the content of an encrypted file `ciphertextSize` bytes long; throws when no content
    /// gives that size (the file was cut or extended).
    static func plaintextSize(ciphertextSize: Int64, header: Header) throws -> Int64 {
        let body = ciphertextSize - Int64(header.length)
        let full = Int64(header.segmentSize + tagSize)
        guard body >= Int64(tagSize), body % full >= Int64(tagSize) else {
            throw Failure(kind: .truncated, detail: "\(ciphertextSize) bytes cannot hold whole segments")
        }
        return body / full * Int64(header.segmentSize) + body % full - Int64(tagSize)
    }
}
