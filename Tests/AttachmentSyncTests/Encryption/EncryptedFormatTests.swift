import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The encrypted attachment format, version 1: what the library writes, the independent Python decoder
/// (`decode_attachment.py`, written from the format's article) reads byte-exact, and every kind of
/// tampering is rejected by both, a whole file read as another attachment's included.
@Suite("Encrypted attachment format")
struct EncryptedFormatTests {
    static let keys: [String: SymmetricKey] = [
        "k1": SymmetricKey(data: Data((0..<32).map { UInt8($0) })),
        "k2": SymmetricKey(data: Data((0..<32).map { UInt8(255 - $0) })),
    ]

    /// Encrypts `content` with key `keyId`, fed in chunks of random sizes.
    static func encrypt(
        _ content: [UInt8], keyId: String = "k1", segmentSize: Int = 1_024, attachmentId: String = "photo-1",
        random: inout SplitMix64
    ) throws -> [UInt8] {
        var stream = try EncryptingStream(
            header: try .fresh(keyId: keyId, segmentSize: segmentSize), masterKey: try #require(keys[keyId]),
            attachmentId: attachmentId)
        var out: [UInt8] = []
        var rest = content[...]
        while !rest.isEmpty {
            let take = Int(random.next(below: 3_000)) + 1
            out += try stream.update(rest.prefix(take))
            rest = rest.dropFirst(take)
        }
        return out + (try stream.finish())
    }

    /// Decrypts `file` in the Swift stream, fed in chunks of random sizes.
    static func decrypt(_ file: [UInt8], attachmentId: String = "photo-1", random: inout SplitMix64) throws
        -> [UInt8]
    {
        var stream = DecryptingStream(attachmentId: attachmentId) { id in
            guard let key = keys[id] else {
                throw EncryptedFormat.Failure(kind: .badHeader, detail: "no key \(id)")
            }
            return key
        }
        var out: [UInt8] = []
        var rest = file[...]
        while !rest.isEmpty {
            let take = Int(random.next(below: 3_000)) + 1
            out += try stream.update(rest.prefix(take))
            rest = rest.dropFirst(take)
        }
        return out + (try stream.finish())
    }

    /// The Python decoder's verdict: the content, or `nil` when it rejected the file.
    static func pythonDecrypt(
        _ file: [UInt8], attachmentId: String = "photo-1", keys: [String: SymmetricKey] = keys,
        in folder: TemporaryDirectory
    ) throws -> [UInt8]? {
        let keysPath = folder.path("keys-\(UUID().uuidString).json")
        let keysJSON = Dictionary(
            uniqueKeysWithValues: keys.map { ($0.key, $0.value.withUnsafeBytes { Data($0).base64EncodedString() }) })
        try JSONEncoder().encode(keysJSON).write(to: URL(fileURLWithPath: keysPath))
        let input = folder.path("input-\(UUID().uuidString)")
        let output = input + ".out"
        try Data(file).write(to: URL(fileURLWithPath: input))
        let python = try PythonWithCryptography.locate()
        let process = try ChildProcess(
            python, [decoderPath, keysPath, attachmentId, input, output], standardOutput: .capture(),
            standardError: .capture())
        let ended = try process.waitBlocking(seconds: 60)
        switch ended {
        case .exited(0): return Array(try Data(contentsOf: URL(fileURLWithPath: output)))
        case .exited(1): return nil
        default: throw HarnessError("the Python decoder ended with \(ended): \(process.capturedError)")
        }
    }

    static let decoderPath = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("decode_attachment.py").path

    @Test(
        "content of every size round-trips through the stream, and the independent Python decoder reads it byte-exact")
    func roundTrips() throws {
        let folder = try TemporaryDirectory()
        var random = SplitMix64(seed: SplitMix64.seed(from: "ATTACHMENT_SYNC_ENCRYPTION_SEED"))
        for (size, segmentSize) in [
            (0, 1_024), (1, 1_024), (1_023, 1_024), (1_024, 1_024), (1_025, 1_024), (3 * 1_024 + 5, 1_024),
            (200_000, 65_536), (131_072, 65_536),
        ] {
            let content = (0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let file = try Self.encrypt(content, segmentSize: segmentSize, random: &random)
            let header = try #require(try EncryptedFormat.Header.parse(file))
            #expect(Int64(file.count) == EncryptedFormat.ciphertextSize(plaintextSize: Int64(size), header: header))
            #expect(try EncryptedFormat.plaintextSize(ciphertextSize: Int64(file.count), header: header) == Int64(size))
            #expect(try Self.decrypt(file, random: &random) == content, "\(size) bytes in \(segmentSize)-byte segments")
            #expect(try Self.pythonDecrypt(file, in: folder) == content, "Python: \(size) bytes")
            #expect(!file.starts(with: content.prefix(64)) || content.isEmpty)
        }
    }

    @Test("the article's test vector: the same header, file key and segment, byte for byte")
    func testVector() throws {
        let header = EncryptedFormat.Header(
            keyId: "k1", segmentSize: 1_024, salt: Array(repeating: 0x11, count: 32),
            noncePrefix: Array(repeating: 0x22, count: 7))
        let master = try #require(Self.keys["k1"])
        var stream = try EncryptingStream(header: header, masterKey: master, attachmentId: "photo-1")
        let file = try stream.update(Array("hello, attachment".utf8)) + (try stream.finish())
        func hex(_ bytes: some Sequence<UInt8>) -> String { bytes.map { String(format: "%02x", $0) }.joined() }
        #expect(
            hex(file.prefix(50)) == "4153450100000400026b31" + String(repeating: "11", count: 32)
                + String(repeating: "22", count: 7))
        #expect(
            EncryptedFormat.fileKey(master: master, header: header).withUnsafeBytes { hex($0) }
                == "3ba736a88dae739090eac41c318ec12bd486153fb9490beaa69f0f435d97f33a")
        #expect(hex(file.dropFirst(50)) == "45ef5e0cd59c66b52c0d49a61981315b3a77cf323e1a99f7d15cc042b481ada93a")
    }

    @Test("a read from any segment on returns that part of the content, authenticated")
    func rangedReads() throws {
        var random = SplitMix64(seed: 7)
        let content = (0..<(5 * 1_024 + 300)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        let file = try Self.encrypt(content, random: &random)
        let header = try #require(try EncryptedFormat.Header.parse(file))
        for segment in 0...5 {
            var stream = try DecryptingStream(
                header: header, masterKey: try #require(Self.keys["k1"]), attachmentId: "photo-1",
                fromSegment: UInt32(segment))
            let start = header.length + segment * (1_024 + EncryptedFormat.tagSize)
            let read = try stream.update(file[start...]) + (try stream.finish())
            #expect(read == Array(content[(segment * 1_024)...]), "from segment \(segment)")
        }
        // A segment read at the wrong index does not authenticate.
        var misplaced = try DecryptingStream(
            header: header, masterKey: try #require(Self.keys["k1"]), attachmentId: "photo-1", fromSegment: 2)
        #expect(throws: EncryptedFormat.Failure.self) {
            _ = try misplaced.update(file[(header.length + 1_040)...])
        }
    }

    /// One way of tampering with an encrypted file.
    struct Tampering: CustomTestStringConvertible, Sendable {
        var name: String
        var change: @Sendable (_ file: [UInt8], _ other: [UInt8], _ headerLength: Int) -> [UInt8]
        var testDescription: String { name }
    }

    static let whole = 1_024 + EncryptedFormat.tagSize
    static let tamperings: [Tampering] = [
        Tampering(name: "cut at a segment's end (the last segment dropped)") { file, _, h in
            Array(file.prefix(h + 3 * whole))
        },
        Tampering(name: "cut inside a segment") { file, _, h in Array(file.prefix(h + whole + 500)) },
        Tampering(name: "cut inside the header") { file, _, h in Array(file.prefix(h - 3)) },
        Tampering(name: "cut to the header alone") { file, _, h in Array(file.prefix(h)) },
        Tampering(name: "a byte added at the end") { file, _, _ in file + [0] },
        Tampering(name: "the last segment repeated") { file, _, h in file + file[(h + 3 * whole)...] },
        Tampering(name: "two segments swapped") { file, _, h in
            Array(file.prefix(h)) + file[(h + whole)..<(h + 2 * whole)] + file[h..<(h + whole)]
                + file[(h + 2 * whole)...]
        },
        Tampering(name: "a segment dropped from the middle") { file, _, h in
            Array(file.prefix(h + whole)) + file[(h + 2 * whole)...]
        },
        Tampering(name: "a segment from another file with the same key") { file, other, h in
            Array(file.prefix(h + whole)) + other[(h + whole)..<(h + 2 * whole)] + file[(h + 2 * whole)...]
        },
        Tampering(name: "another file's header") { file, other, h in Array(other.prefix(h)) + file[h...] },
        Tampering(name: "a bit of the salt flipped") { file, _, _ in flip(file, at: 9 + 2 + 5) },
        Tampering(name: "a bit of the nonce prefix flipped") { file, _, h in flip(file, at: h - 2) },
        Tampering(name: "the segment size changed") { file, _, _ in flip(file, at: 6) },
        Tampering(name: "the key id changed to another key's") { file, _, _ in
            var changed = file
            changed[10] = UInt8(ascii: "2")
            return changed
        },
        Tampering(name: "a bit of content flipped") { file, _, h in flip(file, at: h + whole + 100) },
        Tampering(name: "a bit of a tag flipped") { file, _, h in flip(file, at: h + whole - 1) },
        Tampering(name: "a bit of the last segment flipped") { file, _, _ in flip(file, at: file.count - 20) },
        Tampering(name: "the version changed") { file, _, _ in flip(file, at: 3) },
    ]

    static func flip(_ file: [UInt8], at index: Int) -> [UInt8] {
        var changed = file
        changed[index] ^= 0x04
        return changed
    }

    @Test("tampering is rejected by both decoders", arguments: tamperings)
    func tamperingIsRejected(_ tampering: Tampering) throws {
        let folder = try TemporaryDirectory()
        var random = SplitMix64(seed: 11)
        let content = (0..<(3 * 1_024 + 500)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        let file = try Self.encrypt(content, random: &random)
        let other = try Self.encrypt(content, random: &random)
        let header = try #require(try EncryptedFormat.Header.parse(file))
        #expect(header.keyId == "k1")
        let tampered = tampering.change(file, other, header.length)
        #expect(tampered != file)
        #expect(throws: EncryptedFormat.Failure.self, "Swift") { try Self.decrypt(tampered, random: &random) }
        #expect(try Self.pythonDecrypt(tampered, in: folder) == nil, "Python")
    }

    @Test("a whole file read as another attachment's is rejected by both decoders, from its first segment on")
    func anotherAttachmentsFile() throws {
        let folder = try TemporaryDirectory()
        var random = SplitMix64(seed: 17)
        let content = (0..<(2 * 1_024 + 10)).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        let file = try Self.encrypt(content, attachmentId: "a", random: &random)
        #expect(try Self.decrypt(file, attachmentId: "a", random: &random) == content)
        #expect(try Self.pythonDecrypt(file, attachmentId: "a", in: folder) == content)
        for other in ["b", "a ", "A", "", "ab"] {
            #expect(throws: EncryptedFormat.Failure.self, "Swift, read as \(other)") {
                try Self.decrypt(file, attachmentId: other, random: &random)
            }
            #expect(try Self.pythonDecrypt(file, attachmentId: other, in: folder) == nil, "Python, read as \(other)")
        }
        // Not even the first segment's content is handed out.
        var stream = DecryptingStream(attachmentId: "b") { _ in Self.keys["k1"]! }
        #expect(throws: EncryptedFormat.Failure.self) { _ = try stream.update(file) }
    }

    @Test("a stream used after its last segment throws rather than sealing more")
    func usedAfterFinish() throws {
        var stream = try EncryptingStream(
            header: try .fresh(keyId: "k1", segmentSize: 1_024), masterKey: try #require(Self.keys["k1"]),
            attachmentId: "photo-1")
        _ = try stream.finish()
        #expect(throws: EncryptedFormat.Failure.self) { _ = try stream.update([1]) }
        #expect(throws: EncryptedFormat.Failure.self) { _ = try stream.finish() }
    }

    @Test("the wrong key, or none, opens nothing")
    func wrongKey() throws {
        var random = SplitMix64(seed: 13)
        let content = Array(repeating: UInt8(7), count: 2_000)
        var stream = try EncryptingStream(
            header: try .fresh(keyId: "k1", segmentSize: 1_024), masterKey: try #require(Self.keys["k2"]),
            attachmentId: "photo-1")
        let file = try stream.update(content) + (try stream.finish())
        #expect(throws: EncryptedFormat.Failure.self) { try Self.decrypt(file, random: &random) }
        #expect(try Self.pythonDecrypt(file, in: try TemporaryDirectory()) == nil)
        #expect(throws: EncryptedFormat.Failure.self) {
            _ = try EncryptingStream(
                header: try .fresh(keyId: "", segmentSize: 1_024), masterKey: Self.keys["k1"]!, attachmentId: "photo-1")
        }
    }
}

/// A Python 3 with the `cryptography` package, for the independent decoder.
enum PythonWithCryptography {
    static func locate() throws -> String {
        for candidate in ["/usr/bin/python3", "/usr/local/bin/python3"]
        where FileManager.default.isExecutableFile(atPath: candidate) {
            let probe = try ChildProcess(candidate, ["-c", "import cryptography"])
            if try probe.waitBlocking(seconds: 30) == .exited(0) { return candidate }
        }
        throw HarnessError("no python3 with the cryptography package: apt-get install python3-cryptography")
    }
}
