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
}
