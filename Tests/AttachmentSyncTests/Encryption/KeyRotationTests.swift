import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// Key rotation of stored files: every file ends under the current key (the Python decoder reads each with
/// it alone), a device that has only the new key reads everything byte-exact, a run after an interruption
/// finishes the job, and a file that cannot be rotated is left exactly as it was.
@Suite("Key rotation", .cleansUp)
struct KeyRotationTests {
    static let k1 = EncryptedFormatTests.keys["k1"]!
    static let k2 = SymmetricKey(data: Data((0..<32).map { UInt8(100 + $0) }))

    /// A device that saved `contents` under key k1 and uploaded them, and one attachment stored plain before
    /// encryption was on (`legacy`).
    static func storedUnderK1(_ memory: InMemoryRemoteStorage, _ contents: [(String, Data)]) async throws
        -> QueueHarness
    {
        let device = try QueueHarness(
            remote: EncryptedRemoteStorage(
                wrapping: memory, keys: StaticKeyProvider(keys: ["k1": k1], current: "k1"), segmentSize: 1_024))
        for (id, data) in contents {
            _ = try await device.queue.saveFile(data: data, mediaType: nil, fileExtension: "jpg", id: id)
        }
        try await device.queue.syncNow()
        return device
    }

    static func keyId(of object: Data) throws -> String? {
        try EncryptedFormat.Header.parse(Array(object))?.keyId
    }

    @Test(
        "an upload not done yet keeps the rotation incomplete: it may still be sent under the old key (a background upload sealed before the switch)"
    )
    func pendingUploadKeepsItIncomplete() async throws {
        let memory = InMemoryRemoteStorage()
        let device = try await Self.storedUnderK1(memory, [("stored", testBytes(3_000))])
        _ = try await device.queue.saveFile(data: testBytes(2_000), mediaType: nil, fileExtension: "jpg", id: "pending")
        let both = StaticKeyProvider(keys: ["k1": Self.k1, "k2": Self.k2], current: "k2")
        let remote = EncryptedRemoteStorage(wrapping: memory, keys: both, segmentSize: 1_024)
        let report = try await KeyRotation.rotate(db: device.db, remote: remote)
        #expect(report.rotated == ["stored"])
        #expect(report.failed.isEmpty)
        #expect(report.pendingUploads == ["pending"])
        #expect(!report.isComplete, "the old key may still be needed for the pending upload")

        try await device.queue.syncNow()
        let after = try await KeyRotation.rotate(db: device.db, remote: remote)
        #expect(after.pendingUploads.isEmpty)
        #expect(after.rotated == ["pending"] && after.isComplete)
    }

    @Test(
        "every stored file ends under the current key; a device with the new key alone reads them; run again, nothing changes"
    )
    func rotatesEverything() async throws {
        let memory = InMemoryRemoteStorage()
        await memory.setCreateOnly(true)
        var random = SplitMix64(seed: 21)
        let contents = (0..<6).map { index in
            ("f\(index)", Data((0..<(index * 1_500)).map { _ in UInt8(truncatingIfNeeded: random.next()) }))
        }
        let device = try await Self.storedUnderK1(memory, contents)
        let legacy = testBytes(2_500)
        _ = try await device.queue.saveFile(data: legacy, mediaType: nil, fileExtension: "jpg", id: "legacy")
        try await device.queue.syncNow()
        // As if stored before encryption was turned on.
        await memory.setFile(legacy, named: "legacy.jpg", sha256: FileStreaming.sha256(legacy))
        let before = await memory.files

        let both = StaticKeyProvider(keys: ["k1": Self.k1, "k2": Self.k2], current: "k2")
        let remote = EncryptedRemoteStorage(
            wrapping: memory, keys: both, plaintextReads: .allowed { $0.id == "legacy" }, segmentSize: 1_024)
        let report = try await KeyRotation.rotate(db: device.db, remote: remote)
        #expect(report.rotated == ["f0", "f1", "f2", "f3", "f4", "f5", "legacy"])
        #expect(report.failed.isEmpty && report.missing.isEmpty && report.isComplete)
        #expect(report.keyId == "k2")

        let folder = try TemporaryDirectory()
        let decoderKeys = ["k2": Self.k2]
        for (id, data) in contents + [("legacy", legacy)] {
            let object = try #require(await memory.file(named: "\(id).jpg"))
            #expect(try Self.keyId(of: object) == "k2", "\(id) under the new key")
            #expect(object != before["\(id).jpg"], "\(id) was replaced")
            #expect(
                try EncryptedFormatTests.pythonDecrypt(Array(object), attachmentId: id, keys: decoderKeys, in: folder)
                    == Array(data), "the independent decoder reads \(id) with the new key alone")
            #expect(await memory.storedSHA256(named: "\(id).jpg") == FileStreaming.sha256(object))
        }

        // A device that never had k1.
        let reader = try QueueHarness(
            watch: true,
            remote: EncryptedRemoteStorage(
                wrapping: memory, keys: StaticKeyProvider(keys: ["k2": Self.k2], current: "k2")))
        try await reader.queue.startSync()
        for (id, _) in contents + [("legacy", legacy)] { try await reader.addChecklist("c-\(id)", photo: id) }
        for (id, data) in contents + [("legacy", legacy)] {
            try await reader.waitForState(id, .synced)
            #expect(reader.bytesOnDisk("\(id).jpg") == data, "\(id) byte-exact")
        }

        // Again: everything is under k2 already; nothing is replaced.
        let rotatedFiles = await memory.files
        let again = try await KeyRotation.rotate(db: device.db, remote: remote)
        #expect(again.rotated.isEmpty && again.upToDate == 7 && again.isComplete)
        #expect(await memory.files == rotatedFiles)
        await device.queue.close()
        await reader.queue.close()
    }

    @Test(
        "interrupted by failures, a file is left as it was; the next run with the journal finishes without downloading what was done"
    )
    func resumesWithTheJournal() async throws {
        let memory = InMemoryRemoteStorage()
        let contents = (0..<5).map { ("g\($0)", testBytes(3_000 + $0)) }
        let device = try await Self.storedUnderK1(memory, contents)
        let before = await memory.files
        let remote = EncryptedRemoteStorage(
            wrapping: memory, keys: StaticKeyProvider(keys: ["k1": Self.k1, "k2": Self.k2], current: "k2"),
            segmentSize: 1_024)
        let journalFolder = try TemporaryDirectory()
        let journal = URL(fileURLWithPath: journalFolder.path("rotation.log"))

        // Two replaces fail (the connection drops as each is sent).
        await memory.failNext(.upload, count: 2, with: AttachmentError(code: .remoteUnavailable, message: "dropped"))
        let first = try await KeyRotation.rotate(db: device.db, remote: remote, journal: journal)
        #expect(first.failed.count == 2 && first.rotated.count == 3)
        #expect(first.failed.allSatisfy { $0.code == .remoteUnavailable })
        for failure in first.failed {
            let name = "\(failure.attachmentId).jpg"
            #expect(await memory.file(named: name) == before[name], "\(failure.attachmentId) left as it was")
        }

        let downloadsBefore = await memory.downloadCount
        let second = try await KeyRotation.rotate(db: device.db, remote: remote, journal: journal)
        #expect(second.isComplete)
        #expect(second.rotated.sorted() == first.failed.map(\.attachmentId).sorted())
        #expect(second.upToDate == 3, "the journal's")
        #expect(await memory.downloadCount - downloadsBefore == 2, "only the two left were downloaded")
        for (id, _) in contents {
            #expect(try Self.keyId(of: try #require(await memory.file(named: "\(id).jpg"))) == "k2")
        }
        await device.queue.close()
    }

    @Test("a missing old key, a damaged file, or another attachment's file: each reported and left exactly as it was")
    func leavesWhatItCannotRotate() async throws {
        let memory = InMemoryRemoteStorage()
        let contents = [("a", testBytes(4_000)), ("b", testBytes(4_100)), ("c", testBytes(4_200))]
        let device = try await Self.storedUnderK1(memory, contents)
        // b damaged in storage; c replaced by a's object (whole); a fine.
        var damaged = try #require(await memory.file(named: "b.jpg"))
        damaged[damaged.count - 100] ^= 1
        await memory.setFile(damaged, named: "b.jpg")
        await memory.setFile(try #require(await memory.file(named: "a.jpg")), named: "c.jpg")
        let before = await memory.files

        // Without k1 nothing can be read: every file stays.
        let withoutOld = EncryptedRemoteStorage(
            wrapping: memory, keys: StaticKeyProvider(keys: ["k2": Self.k2], current: "k2"), segmentSize: 1_024)
        let blind = try await KeyRotation.rotate(db: device.db, remote: withoutOld)
        #expect(blind.failed.map(\.attachmentId) == ["a", "b", "c"])
        #expect(blind.failed.first?.code == .keyUnavailable)
        #expect(blind.failed.first?.reason.contains("\"k1\"") == true, "names the key id")
        #expect(await memory.files == before)

        let remote = EncryptedRemoteStorage(
            wrapping: memory, keys: StaticKeyProvider(keys: ["k1": Self.k1, "k2": Self.k2], current: "k2"),
            segmentSize: 1_024)
        let report = try await KeyRotation.rotate(db: device.db, remote: remote)
        #expect(report.rotated == ["a"])
        #expect(report.failed.map(\.attachmentId) == ["b", "c"])
        #expect(report.failed.allSatisfy { $0.code == .integrityMismatch })
        #expect(await memory.file(named: "b.jpg") == before["b.jpg"])
        #expect(await memory.file(named: "c.jpg") == before["c.jpg"])

        // No current key: nothing starts.
        let noCurrent = EncryptedRemoteStorage(
            wrapping: memory, keys: StaticKeyProvider(keys: ["k1": Self.k1], current: "k3"), segmentSize: 1_024)
        await #expect(throws: AttachmentError.self) { try await KeyRotation.rotate(db: device.db, remote: noCurrent) }
        await device.queue.close()
    }

    @Test("a false 'not found' is a failure, not a missing file; a synced file really gone is a failure too")
    func notFoundIsNotMissing() async throws {
        let memory = InMemoryRemoteStorage()
        let device = try await Self.storedUnderK1(memory, [("a", testBytes(3_000)), ("b", testBytes(3_100))])
        let before = await memory.files
        let remote = EncryptedRemoteStorage(
            wrapping: memory, keys: StaticKeyProvider(keys: ["k1": Self.k1, "k2": Self.k2], current: "k2"),
            segmentSize: 1_024)
        // The remote answers one download "not found" although the file is there (model history 361).
        await memory.failNext(
            .download, with: AttachmentError(code: .remoteNotFound, message: "a wrong 404", attachmentId: "a"))
        let first = try await KeyRotation.rotate(db: device.db, remote: remote)
        #expect(!first.isComplete, "an existing file under the old key is never reported done")
        #expect(first.missing.isEmpty)
        #expect(first.failed.count == 1)
        let unrotated = try #require(first.failed.first?.attachmentId)
        #expect(await memory.file(named: "\(unrotated).jpg") == before["\(unrotated).jpg"])
        let second = try await KeyRotation.rotate(db: device.db, remote: remote)
        #expect(second.isComplete && second.rotated == [unrotated])

        // A synced attachment's file that is really gone: a failure (the remote should hold it).
        await memory.removeFile(named: "b.jpg")
        let third = try await KeyRotation.rotate(db: device.db, remote: remote)
        #expect(!third.isComplete)
        #expect(third.failed.map(\.attachmentId) == ["b"])
        #expect(third.failed.first?.code == .remoteNotFound)
        await device.queue.close()
    }

    @Test("a remote that cannot replace files is refused before anything is read")
    func needsAReplaceableRemote() async throws {
        let memory = InMemoryRemoteStorage()
        let device = try await Self.storedUnderK1(memory, [("a", testBytes(100))])
        let remote = EncryptedRemoteStorage(
            wrapping: NotReplaceable(base: memory), keys: StaticKeyProvider(keys: ["k2": Self.k2], current: "k2"))
        do {
            _ = try await KeyRotation.rotate(db: device.db, remote: remote)
            Issue.record("rotated through a remote that cannot replace")
        } catch let error as AttachmentError {
            #expect(error.code == .unsupported)
        }
        await device.queue.close()
    }

    /// A remote that only uploads, downloads and deletes.
    struct NotReplaceable: RemoteStorageAdapter {
        let base: InMemoryRemoteStorage
        func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
            try await base.uploadFile(data: data, attachment: attachment)
        }
        func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
            try await base.downloadFile(attachment: attachment)
        }
        func deleteFile(attachment: AttachmentSync.Attachment) async throws {
            try await base.deleteFile(attachment: attachment)
        }
    }
}
