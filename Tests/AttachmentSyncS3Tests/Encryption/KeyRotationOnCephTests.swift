import AttachmentSync
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync
@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// Key rotation on Ceph: the S3 adapter replaces an object only while it holds the one that was read
/// (`If-Match`; Ceph 16 compares it unquoted, which the adapter falls back to), a multipart-uploaded object
/// included; a device with only the new key reads every file afterwards.
@Suite("Key rotation on Ceph")
struct KeyRotationOnCephTests {
    static let old = SymmetricKey(data: Data((0..<32).map { UInt8($0 &* 3) }))
    static let new = SymmetricKey(data: Data((0..<32).map { UInt8($0 &* 5 &+ 1) }))

    @Test(
        "stored objects are replaced under the new key (multipart-uploaded included); other content is never replaced")
    func rotatesOnCeph() async throws {
        try await S3TestBucket.with("rotation") { _, bucket in
            let admin = try bucket.makeStorage()
            let deviceRemote = try bucket.makeStorage(transport: .urlSession) {
                $0.multipartThreshold = PresignedRemoteStorageTests.fiveMiB
                $0.partSize = PresignedRemoteStorageTests.fiveMiB
            }
            try await withTemporaryDirectory { directory in
                var saved: [(id: String, filename: String, content: Data)] = []
                let oldKeys = StaticKeyProvider(keys: ["2026-05": Self.old], current: "2026-05")
                try await S3QueueDevice.with(
                    folder: directory.appendingPathComponent("a"),
                    storage: EncryptedRemoteStorage(wrapping: deviceRemote, keys: oldKeys)
                ) { a in
                    for (index, size) in [150_000, 6 * 1024 * 1024 + 5].enumerated() {
                        let content = testBytes(count: size, seed: UInt32(700 + index))
                        let photo = try await a.savePhoto(content, checklist: "item-\(index)")
                        saved.append((photo.id, photo.filename, content))
                    }
                    try await a.queue.syncNow()

                    // The conditional replace itself: a stale expectation replaces nothing.
                    let first = AttachmentSync.Attachment(id: saved[0].id, filename: saved[0].filename, state: .synced)
                    let before = try await admin.downloadFile(attachment: first)
                    let other = directory.appendingPathComponent("other")
                    try Data("other".utf8).write(to: other)
                    do {
                        try await admin.replaceFile(
                            fileURL: other, attachment: first, replacing: FileStreaming.sha256(Data("stale".utf8)))
                        Issue.record("replaced an object that was not the one expected")
                    } catch let error as AttachmentError {
                        #expect(error.code == .conflict)
                    }
                    #expect(try await admin.downloadFile(attachment: first) == before)

                    let rotating = EncryptedRemoteStorage(
                        wrapping: admin,
                        keys: StaticKeyProvider(keys: ["2026-05": Self.old, "2026-11": Self.new], current: "2026-11"))
                    let report = try await KeyRotation.rotate(db: a.db, remote: rotating)
                    #expect(report.rotated == saved.map(\.id).sorted(), "\(report.failed)")
                    #expect(report.isComplete)
                    for file in saved {
                        let plain = AttachmentSync.Attachment(id: file.id, filename: file.filename, state: .synced)
                        let stored = try await admin.downloadFile(attachment: plain)
                        #expect(try EncryptedFormat.Header.parse(Array(stored.prefix(304)))?.keyId == "2026-11")
                        let info = try #require(try await admin.fileInfo(attachment: plain))
                        #expect(info.sha256 == FileStreaming.sha256(stored), "the stored hash is the new ciphertext's")
                        #expect(stored.range(of: file.content.prefix(64)) == nil)
                    }
                    let again = try await KeyRotation.rotate(db: a.db, remote: rotating)
                    #expect(again.rotated.isEmpty && again.upToDate == saved.count)
                }
                let newOnly = StaticKeyProvider(keys: ["2026-11": Self.new], current: "2026-11")
                try await S3QueueDevice.with(
                    folder: directory.appendingPathComponent("b"),
                    storage: EncryptedRemoteStorage(wrapping: try bucket.makeStorage(), keys: newOnly)
                ) { b in
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
        }
    }
}
