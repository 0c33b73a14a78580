import AttachmentSync
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync
@testable import AttachmentSyncHTTP
@testable import AttachmentSyncS3

/// `EncryptedRemoteStorage` handing its transfers to a background service (the spooled one, in a process of
/// its own) on Ceph: the service sends encrypted copies and fetches ciphertext, the queue decrypts what it
/// adopts, and a download whose key is missing waits for it.
@Suite("Encrypted attachments through a background service on Ceph")
struct EncryptedBackgroundOnCephTests {
    /// Keys that can be added while the queue runs.
    final class ChangingKeys: KeyProvider {
        let keys = LockedValue<[String: SymmetricKey]>([:])
        func currentKeyId() async throws -> String { "2026-11" }
        func key(id: String) async throws -> SymmetricKey? { keys.withLock { $0[id] } }
    }

    /// The library's temporary files in a device's attachments folder.
    static func temporaryFiles(_ device: S3QueueDevice) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: device.queue.attachmentsDirectory.path)
            .filter { $0.hasPrefix(".attachment-sync-") }
    }

    @Test(
        "the service uploads encrypted copies (removed once adopted) and downloads ciphertext, which another device decrypts byte-exact; none of it goes through the queue's adapter; a download whose key is missing waits for it"
    )
    func encryptedTransfersGoThroughTheService() async throws {
        let operationsA = LockedValue<[String]>([])
        try await S3TestBucket.with("enc-handoff", configure: BackgroundHandOffTests.recording(operationsA)) {
            storageA, bucket in
            try await withTemporaryDirectory { directory in
                let sizes = [0, 1_000, 100_000, 3_000_000]
                var saved: [(id: String, filename: String, content: Data)] = []
                try await BackgroundHandOffTests.withService(.spool, directory.appendingPathComponent("spool-a")) {
                    service in
                    try await S3QueueDevice.with(
                        folder: directory.appendingPathComponent("a"),
                        storage: EncryptedRemoteStorage(wrapping: storageA, keys: EncryptedOnCephTests.keys),
                        configure: { $0.backgroundTransfers = BackgroundTransfers(service: service) }
                    ) { a in
                        let events = a.queue.events
                        try await a.queue.startSync()
                        for (index, size) in sizes.enumerated() {
                            let content = testBytes(count: size, seed: UInt32(900 + index))
                            let photo = try await a.savePhoto(content, checklist: "item-\(index)")
                            saved.append((photo.id, photo.filename, content))
                        }
                        for file in saved { try await a.waitForState(file.id, .synced) }
                        let expected = Set(saved.map(\.id))
                        let handedOff = try await withDeadline("a hand-off event per file") {
                            var ids: Set<String> = []
                            for await event in events {
                                if case .handedOff(let id) = event { ids.insert(id) }
                                if ids.count == expected.count { break }
                            }
                            return ids
                        }
                        #expect(handedOff == expected)
                        try await BackgroundHandOffTests.waitUntilAcknowledged(service)
                        #expect(try Self.temporaryFiles(a).isEmpty, "every encrypted copy removed once adopted")
                        for file in saved {
                            #expect(
                                try await a.queue.attachment(id: file.id)?.size == Int64(file.content.count),
                                "the record keeps the content's size, not the ciphertext's")
                        }
                    }
                }
                #expect(!operationsA.withLock { $0 }.contains("PutObject"), "no upload ran through the queue's adapter")
                let admin = try bucket.makeStorage()
                for file in saved {
                    let plain = AttachmentSync.Attachment(id: file.id, filename: file.filename, state: .synced)
                    let stored = try await admin.downloadFile(attachment: plain)
                    #expect(stored.starts(with: Data("ASE".utf8)))
                    #expect(file.content.count < 64 || stored.range(of: file.content.prefix(64)) == nil)
                    #expect(try await admin.storedObject(for: plain)?.sha256 == FileStreaming.sha256(stored))
                    var opener = DecryptingStream(attachmentId: file.id) { _ in EncryptedOnCephTests.key }
                    #expect(Data(try opener.update(stored) + (try opener.finish())) == file.content)
                }
                try await admin.shutdown()

                // Another device, whose key arrives late: the service's downloads wait for it, then land.
                let files = saved
                let operationsB = LockedValue<[String]>([])
                let keys = ChangingKeys()
                try await bucket.withStorage(BackgroundHandOffTests.recording(operationsB)) { storageB in
                    try await BackgroundHandOffTests.withService(.spool, directory.appendingPathComponent("spool-b")) {
                        service in
                        try await S3QueueDevice.with(
                            folder: directory.appendingPathComponent("b"),
                            storage: EncryptedRemoteStorage(wrapping: storageB, keys: keys),
                            configure: {
                                $0.backgroundTransfers = BackgroundTransfers(service: service)
                                $0.maxAttempts = 1
                            }
                        ) { b in
                            for (index, file) in files.enumerated() {
                                try await b.addChecklist("item-\(index)", photo: file.id)
                            }
                            try await b.queue.startSync()
                            let waiting = try await withDeadline("every download waiting for its key") {
                                for await status in b.queue.status where status.waitingForKeys.count == files.count {
                                    return status
                                }
                                throw StreamEnded(what: "the status")
                            }
                            #expect(waiting.givenUp.isEmpty, "not given up with maxAttempts 1")
                            #expect(waiting.waitingForKeys.allSatisfy { $0.attempts == 0 }, "no attempt spent")
                            for file in files { #expect(b.bytesOnDisk(file.filename) == nil) }

                            keys.keys.withLock { $0["2026-11"] = EncryptedOnCephTests.key }
                            _ = try await b.queue.keysDidChange()
                            for file in files {
                                try await b.waitForState(file.id, .synced)
                                #expect(b.bytesOnDisk(file.filename) == file.content, "\(file.content.count) bytes")
                            }
                            try await BackgroundHandOffTests.waitUntilAcknowledged(service)
                            #expect(try Self.temporaryFiles(b).isEmpty)
                        }
                    }
                }
                #expect(
                    !operationsB.withLock { $0 }.contains("GetObject"), "no download ran through the queue's adapter")
            }
        }
    }
}
