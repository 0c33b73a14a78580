import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// What `EncryptedRemoteStorage` forms for a background service: an encrypted copy as the body (with the
/// ciphertext's size and SHA-256 as what the remote will hold), nothing for a file the wrapped adapter would
/// not send in the background, and the content of a downloaded body.
@Suite("Encrypted background transfers, formed", .cleansUp)
struct EncryptedBackgroundFormingTests {
    /// A remote in memory that forms background requests for files up to `largest` bytes, noting the size
    /// of each file it is asked about.
    struct FormingMemory: BackgroundTransferForming {
        let memory = InMemoryRemoteStorage()
        let largest: Int64?
        let asked = LockedValue<[Int64]>([])

        var largestBackgroundUpload: Int64? { largest }

        func backgroundUploadRequest(for attachment: AttachmentSync.Attachment, fileURL: URL) async throws
            -> PreparedRequest?
        {
            let size = try SystemFileOperations().info(atPath: fileURL.path)?.size ?? -1
            asked.withLock { $0.append(size) }
            guard size <= largest ?? .max else { return nil }
            return PreparedRequest(
                method: "PUT", url: URL(string: "https://storage.invalid/\(attachment.filename)")!,
                headers: [.init(name: "x-sha256", value: attachment.contentHash ?? "")])
        }

        func backgroundDownloadRequest(for attachment: AttachmentSync.Attachment) async throws -> PreparedRequest? {
            PreparedRequest(method: "GET", url: URL(string: "https://storage.invalid/\(attachment.filename)")!)
        }

        func storedObject(for attachment: AttachmentSync.Attachment) async throws -> RemoteObjectInfo? { nil }

        func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
            try await memory.uploadFile(data: data, attachment: attachment)
        }

        func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
            try await memory.downloadFile(attachment: attachment)
        }

        func deleteFile(attachment: AttachmentSync.Attachment) async throws {
            try await memory.deleteFile(attachment: attachment)
        }
    }

    @Test(
        "the body is an encrypted copy, with the ciphertext's size and SHA-256; a file too large for the wrapped adapter is not encrypted at all"
    )
    func formsAnEncryptedBody() async throws {
        let folder = try TemporaryDirectory()
        let base = FormingMemory(largest: 10_000)
        let remote = EncryptedRemoteStorage(wrapping: base, keys: EncryptedRemoteStorageTests.keys)
        #expect(remote.formsBackgroundTransfers)
        let content = testBytes(3_000)
        let file = URL(fileURLWithPath: folder.path("photo.jpg"))
        try content.write(to: file)
        let body = URL(fileURLWithPath: folder.path(".attachment-sync-tmp-x-handoff-1"))
        let photo = EncryptedRemoteStorageTests.attachment("photo", content)
        let upload = try #require(try await remote.backgroundUpload(for: photo, fileURL: file, bodyFile: body))
        let sealed = try Data(contentsOf: body)
        #expect(upload.bodyFile == body)
        #expect(upload.storedSize == Int64(sealed.count))
        #expect(upload.storedSHA256 == FileStreaming.sha256(sealed))
        #expect(base.asked.withLock { $0 } == [Int64(sealed.count)], "asked about the encrypted copy")
        #expect(upload.request.headers.first?.value == FileStreaming.sha256(sealed), "not the content's hash")
        var opener = DecryptingStream(attachmentId: "photo") { _ in EncryptedRemoteStorageTests.keys.keys["k1"]! }
        #expect(Data(try opener.update(sealed) + (try opener.finish())) == content)

        // Made from the body a background download fetched: the content, byte-exact.
        let target = URL(fileURLWithPath: folder.path("downloaded"))
        let made = try #require(try await remote.contentOfBackgroundDownload(body, for: photo, into: target))
        #expect(try Data(contentsOf: target) == content)
        #expect(made.writtenSHA256 == FileStreaming.sha256(content))

        let large = testBytes(20_000)
        let largeFile = URL(fileURLWithPath: folder.path("large.jpg"))
        try large.write(to: largeFile)
        let largeBody = URL(fileURLWithPath: folder.path(".attachment-sync-tmp-x-handoff-2"))
        let none = try await remote.backgroundUpload(
            for: EncryptedRemoteStorageTests.attachment("large", large), fileURL: largeFile, bodyFile: largeBody)
        #expect(none == nil)
        #expect(base.asked.withLock { $0 }.count == 1, "the wrapped adapter was not asked")
        #expect(!FileManager.default.fileExists(atPath: largeBody.path), "nothing encrypted for nothing")
    }

    @Test("a wrapped adapter that forms no background transfers makes the encrypting one form none either")
    func followsTheWrappedAdapter() async throws {
        let remote = EncryptedRemoteStorage(
            wrapping: InMemoryRemoteStorage(), keys: EncryptedRemoteStorageTests.keys)
        #expect(!remote.formsBackgroundTransfers)
        let spool = try TemporaryDirectory()
        let service = try SpoolTransferService(folder: URL(fileURLWithPath: spool.path("spool")))
        let harness = try QueueHarness(remote: remote) {
            $0.backgroundTransfers = BackgroundTransfers(service: service)
        }
        do {
            try await harness.queue.startSync()
            Issue.record("started with background transfers its remote cannot form")
        } catch let error as AttachmentError {
            #expect(error.code == .invalidConfiguration)
            #expect(error.message.contains("EncryptedRemoteStorage"))
        }
    }
}
