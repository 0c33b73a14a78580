import AttachmentSync
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync
@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// `EncryptedRemoteStorage` over the real remotes on Ceph: the bucket holds only ciphertext, with the
/// ciphertext's SHA-256 as the object's stored hash, multipart uploads included; another device with the same
/// keys gets the content back byte-exact.
@Suite("Encrypted attachments on Ceph")
struct EncryptedOnCephTests {
    enum Remote: String, CaseIterable, Sendable, CustomTestStringConvertible {
        case s3, presigned
        var testDescription: String { rawValue }
    }

    static let key = SymmetricKey(data: Data((0..<32).map { UInt8($0 &* 7) }))
    static let keys = StaticKeyProvider(keys: ["2026-11": key], current: "2026-11")

    /// The remote a device uses (the S3 adapter, or a presigned device whose backend signs for `users/alice/`),
    /// and the backend's own view of what is stored.
    static func remotes(
        _ kind: Remote, _ bucket: S3TestBucket
    ) throws -> (device: any RemoteStorageAdapter, admin: S3RemoteStorage) {
        switch kind {
        case .s3:
            return (
                try bucket.makeStorage(transport: .urlSession) {
                    $0.multipartThreshold = PresignedRemoteStorageTests.fiveMiB
                    $0.partSize = PresignedRemoteStorageTests.fiveMiB
                }, try bucket.makeStorage()
            )
        case .presigned:
            let issuer = try PresignedRemoteStorageTests.issuer(bucket)
            return (
                try PresignedRemoteStorageTests.device(bucket, transport: .urlSession) {
                    try await issuer.authorize($0)
                }, try PresignedRemoteStorageTests.backendView(bucket)
            )
        }
    }

    @Test(
        "the bucket holds ciphertext only (its SHA-256 stored with it), multipart included; another device reads the content",
        arguments: Remote.allCases)
    func bucketHoldsCiphertext(_ kind: Remote) async throws {
        try await S3TestBucket.with("encrypted-\(kind.rawValue)") { _, bucket in
            let (deviceRemote, admin) = try Self.remotes(kind, bucket)
            let remote = EncryptedRemoteStorage(wrapping: deviceRemote, keys: Self.keys)
            try await withTemporaryDirectory { directory in
                var saved: [(id: String, filename: String, content: Data)] = []
                try await S3QueueDevice.with(folder: directory.appendingPathComponent("a"), storage: remote) { a in
                    try await a.queue.startSync()
                    for (index, size) in [200_000, 6 * 1024 * 1024 + 3].enumerated() {
                        let content = testBytes(count: size, seed: UInt32(600 + index))
                        let photo = try await a.savePhoto(content, checklist: "item-\(index)")
                        saved.append((photo.id, photo.filename, content))
                    }
                    for file in saved { try await a.waitForState(file.id, .synced, seconds: 120) }
                }
                for file in saved {
                    let plain = AttachmentSync.Attachment(id: file.id, filename: file.filename, state: .synced)
                    let stored = try await admin.downloadFile(attachment: plain)
                    #expect(stored.starts(with: Data("ASE".utf8)))
                    #expect(stored.range(of: file.content.prefix(64)) == nil, "no content in the clear")
                    let info = try #require(try await admin.storedObject(for: plain))
                    #expect(info.sha256 == FileStreaming.sha256(stored), "the stored hash is the ciphertext's")
                    var opener = DecryptingStream(attachmentId: file.id) { _ in Self.key }
                    #expect(Data(try opener.update(stored) + (try opener.finish())) == file.content)
                }
                try await S3QueueDevice.with(folder: directory.appendingPathComponent("b"), storage: remote) { b in
                    for (index, file) in saved.enumerated() {
                        try await b.addChecklist("item-\(index)", photo: file.id)
                    }
                    try await b.queue.startSync()
                    for file in saved {
                        try await b.waitForState(file.id, .synced, seconds: 120)
                        #expect(b.bytesOnDisk(file.filename) == file.content, "\(file.content.count) bytes")
                    }
                }
            }
            try await admin.shutdown()
            if let s3 = deviceRemote as? S3RemoteStorage { try await s3.shutdown() }
            if let presigned = deviceRemote as? PresignedRemoteStorage { try await presigned.shutdown() }
        }
    }

    @Test("an object far larger than the row's size says is stopped as soon as its size shows, nothing kept")
    func oversizedObjectIsStopped() async throws {
        try await S3TestBucket.with("encrypted-oversized") { storage, _ in
            try await withTemporaryDirectory { directory in
                let big = testBytes(count: 12 * 1024 * 1024, seed: 77)
                let claimed = AttachmentSync.Attachment(
                    id: "photo", filename: "photo.jpg", state: .queuedDownload, size: 1_000)
                try await storage.uploadFile(data: big, attachment: claimed)
                let remote = EncryptedRemoteStorage(wrapping: storage, keys: Self.keys)
                let target = directory.appendingPathComponent(".attachment-sync-download-photo.jpg")
                do {
                    _ = try await remote.downloadFile(attachment: claimed, into: target, from: 0) { _ in }
                    Issue.record("a 12 MiB object was taken for a 1,000-byte attachment")
                } catch let error as AttachmentError {
                    #expect(error.code == .integrityMismatch)
                    #expect(error.message.contains("12582912 bytes"), "\(error.message)")
                }
                let left = try FileManager.default.contentsOfDirectory(atPath: directory.path)
                #expect(left.isEmpty, "nothing kept: \(left)")
            }
        }
    }

    @Test(
        "an encrypted multipart upload interrupted after two parts resumes with only the missing ones; a new key starts over"
    )
    func interruptedEncryptedUploadResumes() async throws {
        let mebibyte = 1024 * 1024
        try await S3TestBucket.with("encrypted-resume") { _, bucket in
            try await withTemporaryDirectory { directory in
                // 16 MiB of content: 5, 5, 5 and just over 1 MiB of ciphertext.
                let content = testBytes(count: 16 * mebibyte, seed: 61)
                let source = directory.appendingPathComponent("clip.bin")
                try content.write(to: source)
                let file = MultipartReplacementTests.attachment("clip.bin", content)
                let partsSent = LockedValue<[Int]>([])
                func storage(failingPart: Int?) throws -> S3RemoteStorage {
                    try bucket.makeStorage { configuration in
                        configuration.multipartThreshold = MultipartReplacementTests.fiveMiB
                        configuration.partSize = MultipartReplacementTests.fiveMiB
                        configuration.partConcurrency = 1
                        configuration.requestObserver = { event in
                            guard event.operation == "UploadPart", let part = event.partNumber else { return }
                            if part == failingPart {
                                throw AttachmentError(code: .remoteUnavailable, message: "injected: network lost")
                            }
                            partsSent.withLock { $0.append(part) }
                        }
                    }
                }
                /// Only the content is left in the folder: every part's file went.
                func onlyTheContentLeft() throws {
                    #expect(try FileManager.default.contentsOfDirectory(atPath: directory.path) == ["clip.bin"])
                }

                let first = try storage(failingPart: 3)
                let failure = await #expect(throws: AttachmentError.self) {
                    try await EncryptedRemoteStorage(wrapping: first, keys: Self.keys)
                        .uploadFile(fileURL: source, attachment: file) { _ in }
                }
                try await first.shutdown()
                #expect(failure?.code == .remoteUnavailable)
                #expect(partsSent.withLock { $0 } == [1, 2])
                try onlyTheContentLeft()

                // The same key: the parts are sealed to the same bytes, so the two stored are kept.
                partsSent.withLock { $0 = [] }
                let again = try storage(failingPart: 3)
                _ = await #expect(throws: AttachmentError.self) {
                    try await EncryptedRemoteStorage(wrapping: again, keys: Self.keys)
                        .uploadFile(fileURL: source, attachment: file) { _ in }
                }
                try await again.shutdown()
                #expect(partsSent.withLock { $0 }.isEmpty, "parts 1 and 2 kept, part 3 failed before it went")

                // Another current key: other bytes, so the upload starts over (the stale one aborted).
                let newKey = SymmetricKey(data: Data(repeating: 9, count: 32))
                let rotated = StaticKeyProvider(keys: ["2026-11": Self.key, "2026-12": newKey], current: "2026-12")
                partsSent.withLock { $0 = [] }
                let restarted = try storage(failingPart: nil)
                try await EncryptedRemoteStorage(wrapping: restarted, keys: rotated)
                    .uploadFile(fileURL: source, attachment: file) { _ in }
                #expect(partsSent.withLock { $0 } == [1, 2, 3, 4])
                try onlyTheContentLeft()
                let plain = AttachmentSync.Attachment(id: file.id, filename: file.filename, state: .synced)
                let stored = try await restarted.downloadFile(attachment: plain)
                #expect(stored.count > content.count && stored.count < content.count + mebibyte)
                #expect(try EncryptedFormat.Header.parse(stored)?.keyId == "2026-12", "sealed under the new key")
                var opener = DecryptingStream(attachmentId: file.id) { $0 == "2026-12" ? newKey : Self.key }
                #expect(Data(try opener.update(stored) + (try opener.finish())) == content)
                #expect(try await restarted.listMultipartUploadIds().isEmpty)
                #expect(try FileManager.default.contentsOfDirectory(atPath: bucket.stateDirectory.path).isEmpty)
                try await restarted.shutdown()
            }
        }
    }
}
