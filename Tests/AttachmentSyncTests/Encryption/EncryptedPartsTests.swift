import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A large encrypted upload to an adapter that uploads in parts makes each part from the content when it
/// goes: the parts are byte for byte the encrypted file, no sealed copy of the file's size is made, and
/// content that changes after the first pass stops the upload.
@Suite("Encrypted uploads made a part at a time", .cleansUp)
struct EncryptedPartsTests {
    /// An adapter that uploads everything in parts of `partSize` bytes, assembling what it gets, and notes the
    /// largest file beside the content while it uploads.
    final class PartsRecorder: PartwiseUploading, @unchecked Sendable {
        // `@unchecked Sendable`: every field is a `LockedValue` or a constant.
        let partSize: Int64
        let folder: URL
        let assembled = LockedValue(Data())
        let storedSHA256 = LockedValue<String?>(nil)
        let largestBeside = LockedValue<Int64>(0)
        /// The part after which the content file is changed (to test the check), if any.
        let changeAfterPart: Int?

        init(partSize: Int64, folder: URL, changeAfterPart: Int? = nil) {
            self.partSize = partSize
            self.folder = folder
            self.changeAfterPart = changeAfterPart
        }

        func uploadsInParts(size: Int64) -> Bool { true }

        func uploadParts(
            _ parts: any UploadParts, attachment: AttachmentSync.Attachment,
            progress: @escaping TransferProgressHandler
        ) async throws {
            #expect(attachment.size == parts.size && attachment.contentHash == parts.sha256)
            storedSHA256.withLock { $0 = parts.sha256 }
            var offset: Int64 = 0
            var number = 0
            while offset < parts.size {
                let length = min(partSize, parts.size - offset)
                let made = try await parts.materialize(offset: offset, length: length, md5: number % 2 == 0)
                let url = made.url
                defer { try? FileManager.default.removeItem(at: url) }
                let part = try Data(contentsOf: url)
                #expect(part.count == Int(length))
                // The digests are those of the bytes in the file.
                #expect(made.sha256 == FileStreaming.sha256(part))
                #expect(made.md5 == (number % 2 == 0 ? Data(Insecure.MD5.hash(data: part)).base64EncodedString() : nil))
                assembled.withLock { $0 += part }
                for name in try FileManager.default.contentsOfDirectory(atPath: folder.path) where name != "content.bin"
                {
                    let size =
                        try FileManager.default.attributesOfItem(
                            atPath: folder.appendingPathComponent(name).path)[.size] as? Int64 ?? 0
                    largestBeside.withLock { $0 = max($0, size) }
                }
                offset += length
                number += 1
                if number == changeAfterPart {
                    var content = try Data(contentsOf: folder.appendingPathComponent("content.bin"))
                    content[content.count - 10] ^= 1
                    try content.write(to: folder.appendingPathComponent("content.bin"))
                }
            }
        }

        func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
            Issue.record("a whole file was uploaded, not parts")
        }

        func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data { Data() }

        func deleteFile(attachment: AttachmentSync.Attachment) async throws {}
    }

    static let keys = StaticKeyProvider(keys: EncryptedFormatTests.keys, current: "k1")

    @Test(
        "parts of any size and offset are the encrypted file byte for byte, with no copy of its size made",
        arguments: [(2_000_000, 1_024, 65_536), (3 << 20, 65_536, 1_000_003), (1_048_577, 4_096, 5_000)])
    func partsAreTheEncryptedFile(size: Int, segmentSize: Int, partSize: Int64) async throws {
        let folder = try TemporaryDirectory()
        let contentURL = folder.url.appendingPathComponent("content.bin")
        var random = SplitMix64(seed: UInt64(size))
        let content = Data((0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        try content.write(to: contentURL)
        let attachment = EncryptedRemoteStorageTests.attachment("photo", content)
        let recorder = PartsRecorder(partSize: partSize, folder: folder.url)
        let remote = EncryptedRemoteStorage(wrapping: recorder, keys: Self.keys, segmentSize: segmentSize)
        try await remote.uploadFile(fileURL: contentURL, attachment: attachment) { _ in }

        // The same file sealed whole, as the copy it used to be.
        let whole = try TemporaryDirectory()
        let sealedURL = whole.url.appendingPathComponent("sealed")
        let sealed = try await remote.seal(contentURL, of: attachment, into: sealedURL)
        let expected = try Data(contentsOf: sealedURL)
        let assembled = recorder.assembled.withLock { $0 }
        #expect(assembled.count == expected.count)
        #expect(assembled == expected, "the parts are the encrypted file")
        #expect(recorder.storedSHA256.withLock { $0 } == sealed.sealedSHA256)
        #expect(recorder.largestBeside.withLock { $0 } <= partSize, "no file beside the content beyond a part")
        var opener = DecryptingStream(attachmentId: "photo") { _ in EncryptedFormatTests.keys["k1"]! }
        #expect(Data(try opener.update(assembled) + (try opener.finish())) == content)
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.path)
        #expect(left == ["content.bin"], "each part's file is removed: \(left)")
    }

    @Test("content changed after the first pass stops the upload at the first part made from it")
    func changedContentStopsTheUpload() async throws {
        let folder = try TemporaryDirectory()
        let contentURL = folder.url.appendingPathComponent("content.bin")
        let content = testBytes(3_000_000, seed: 5)
        try content.write(to: contentURL)
        let attachment = EncryptedRemoteStorageTests.attachment("photo", content)
        let recorder = PartsRecorder(partSize: 1_000_000, folder: folder.url, changeAfterPart: 1)
        let remote = EncryptedRemoteStorage(wrapping: recorder, keys: Self.keys)
        do {
            try await remote.uploadFile(fileURL: contentURL, attachment: attachment) { _ in }
            Issue.record("parts of changed content were made")
        } catch let error as AttachmentError {
            #expect(error.code == .integrityMismatch)
            #expect(error.message.contains("changed while it was uploaded"), "\(error.message)")
        }
        // The first part went; the changed bytes are in the last part, which was never made.
        #expect(recorder.assembled.withLock { $0.count } >= 1_000_000)
        #expect(recorder.assembled.withLock { $0.count } < 3_000_000)
    }
    @Test("a part asked for by an upload already cancelled is not sealed, and leaves no file")
    func cancelledUploadSealsNoPart() async throws {
        let folder = try TemporaryDirectory()
        let contentURL = folder.url.appendingPathComponent("content.bin")
        let content = testBytes(3_000_000, seed: 7)
        try content.write(to: contentURL)
        let attachment = EncryptedRemoteStorageTests.attachment("photo", content)
        let recorder = CancellingRecorder(folder: folder.url)
        let remote = EncryptedRemoteStorage(wrapping: recorder, keys: Self.keys)
        await #expect(throws: CancellationError.self) {
            try await remote.uploadFile(fileURL: contentURL, attachment: attachment) { _ in }
        }
        #expect(recorder.outcome.withLock { $0 } == "cancelled")
        let left = try FileManager.default.contentsOfDirectory(atPath: folder.url.path)
        #expect(left == ["content.bin"], "no part file: \(left)")
    }

    /// An adapter whose upload is cancelled (as by `stopSync`) just before it asks for its first part.
    final class CancellingRecorder: PartwiseUploading, @unchecked Sendable {
        // `@unchecked Sendable`: `outcome` is a `LockedValue`, `folder` a constant.
        let folder: URL
        /// What asking for the first part did: "cancelled", "made", or another error's description.
        let outcome = LockedValue("")

        init(folder: URL) { self.folder = folder }

        func uploadsInParts(size: Int64) -> Bool { true }

        func uploadParts(
            _ parts: any UploadParts, attachment: AttachmentSync.Attachment,
            progress: @escaping TransferProgressHandler
        ) async throws {
            let result = await Task {
                withUnsafeCurrentTask { $0?.cancel() }
                return try await parts.materialize(offset: 0, length: min(1_000_000, parts.size), md5: true)
            }.result
            switch result {
            case .success(let made):
                outcome.withLock { $0 = "made" }
                try? FileManager.default.removeItem(at: made.url)
            case .failure(is CancellationError): outcome.withLock { $0 = "cancelled" }
            case .failure(let error): outcome.withLock { $0 = "\(error)" }
            }
            throw CancellationError()
        }

        func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
            Issue.record("a whole file was uploaded, not parts")
        }

        func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data { Data() }

        func deleteFile(attachment: AttachmentSync.Attachment) async throws {}
    }
}
