import AttachmentSyncTesting
import Crypto
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// `EncryptedRemoteStorage` over a remote in memory: the remote holds only ciphertext (which the Python
/// decoder reads back), stores the ciphertext's SHA-256, gets the same bytes for a retried upload, and a
/// missing key makes a typed error the queue waits on, never a given-up upload.
@Suite("Encrypted remote storage", .cleansUp)
struct EncryptedRemoteStorageTests {
    static let keys = StaticKeyProvider(keys: EncryptedFormatTests.keys, current: "k1")

    static func attachment(_ id: String, _ content: Data) -> AttachmentSync.Attachment {
        AttachmentSync.Attachment(
            id: id, filename: id + ".jpg", state: .queuedUpload, size: Int64(content.count),
            contentHash: FileStreaming.sha256(content))
    }

    @Test(
        "the remote holds ciphertext only, with its SHA-256; a retried upload sends the same bytes; downloads decrypt")
    func remoteHoldsCiphertext() async throws {
        let folder = try TemporaryDirectory()
        let memory = InMemoryRemoteStorage()
        await memory.setCreateOnly(true)
        let remote = EncryptedRemoteStorage(wrapping: memory, keys: Self.keys)
        var random = SplitMix64(seed: 5)
        let content = Data((0..<150_000).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        let file = URL(fileURLWithPath: folder.path("photo.jpg"))
        try content.write(to: file)
        let photo = Self.attachment("photo", content)
        let reported = LockedValue<[TransferProgress]>([])
        try await remote.uploadFile(fileURL: file, attachment: photo) { progress in
            reported.withLock { $0.append(progress) }
        }
        let stored = try #require(await memory.file(named: "photo.jpg"))
        #expect(stored.starts(with: Data("ASE".utf8)))
        #expect(stored.range(of: content.prefix(32)) == nil, "no content in the clear")
        #expect(await memory.storedSHA256(named: "photo.jpg") == FileStreaming.sha256(stored))
        #expect(await memory.storedSHA256(named: "photo.jpg") != photo.contentHash, "no content hash on the remote")
        #expect(reported.withLock { $0 }.last?.totalBytes == Int64(content.count), "progress in content bytes")
        #expect(
            try EncryptedFormatTests.pythonDecrypt(Array(stored), attachmentId: "photo", in: folder) == Array(content))
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix(".") }
        #expect(leftovers.isEmpty, "the temporary ciphertext is removed: \(leftovers)")

        // Tried again (a crash after the upload, before its commit): the same bytes, so create-only holds.
        try await remote.uploadFile(data: content, attachment: photo)
        #expect(await memory.file(named: "photo.jpg") == stored)
        // The same content under another id encrypts differently.
        try await remote.uploadFile(data: content, attachment: Self.attachment("copy", content))
        #expect(await memory.file(named: "copy.jpg") != stored)

        let target = URL(fileURLWithPath: folder.path("downloaded"))
        let downloaded = LockedValue<[TransferProgress]>([])
        let info = try await remote.downloadFile(attachment: photo, into: target, from: 0) { progress in
            downloaded.withLock { $0.append(progress) }
        }
        #expect(try Data(contentsOf: target) == content)
        let reports = downloaded.withLock { $0 }
        #expect(reports.count > 1)
        #expect(
            reports.allSatisfy { $0.totalBytes == Int64(content.count) && $0.completedBytes <= Int64(content.count) },
            "download progress in content bytes")
        #expect(reports.last?.completedBytes == Int64(content.count))
        #expect(info.writtenSHA256 == photo.contentHash)
        #expect(try await remote.downloadFile(attachment: photo) == content)
    }

    @Test("an object changed on the remote, or not encrypted, is refused as an integrity mismatch")
    func tamperedObjectIsRefused() async throws {
        let folder = try TemporaryDirectory()
        let memory = InMemoryRemoteStorage()
        let remote = EncryptedRemoteStorage(wrapping: memory, keys: Self.keys, segmentSize: 1_024)
        let content = Data(repeating: 9, count: 5_000)
        let photo = Self.attachment("photo", content)
        try await remote.uploadFile(data: content, attachment: photo)
        var stored = try #require(await memory.file(named: "photo.jpg"))
        stored[stored.count - 30] ^= 1
        await memory.setFile(stored, named: "photo.jpg")
        let target = URL(fileURLWithPath: folder.path("downloaded"))
        await #expect(throws: AttachmentError.self) {
            _ = try await remote.downloadFile(attachment: photo, into: target, from: 0) { _ in }
        }
        #expect(!FileManager.default.fileExists(atPath: target.path), "no partial content left")
        await memory.setFile(content, named: "photo.jpg")
        do {
            _ = try await remote.downloadFile(attachment: photo)
            Issue.record("plain content was accepted")
        } catch let error as AttachmentError {
            #expect(error.code == .integrityMismatch)
        }
    }

    @Test(
        "a storage that serves one attachment's whole object as another's is refused, even for a row without a hash")
    func wholeObjectSwapIsRefused() async throws {
        let folder = try TemporaryDirectory()
        let memory = InMemoryRemoteStorage()
        let remote = EncryptedRemoteStorage(wrapping: memory, keys: Self.keys, segmentSize: 1_024)
        let first = Data(repeating: 1, count: 3_000)
        let second = Data(repeating: 2, count: 3_000)
        try await remote.uploadFile(data: first, attachment: Self.attachment("a", first))
        try await remote.uploadFile(data: second, attachment: Self.attachment("b", second))
        // The storage answers for b with a's object, whole (same key, same size).
        await memory.setFile(try #require(await memory.file(named: "a.jpg")), named: "b.jpg")
        // A row that came from another device without a content hash: nothing else would notice.
        let row = AttachmentSync.Attachment(id: "b", filename: "b.jpg", state: .queuedDownload)
        let target = URL(fileURLWithPath: folder.path("downloaded"))
        do {
            _ = try await remote.downloadFile(attachment: row, into: target, from: 0) { _ in }
            Issue.record("a's content was accepted as b's")
        } catch let error as AttachmentError {
            #expect(error.code == .integrityMismatch)
        }
        #expect(!FileManager.default.fileExists(atPath: target.path), "no content of a's written as b's")
        await #expect(throws: AttachmentError.self) { _ = try await remote.downloadFile(attachment: row) }
        // The Python decoder, told which attachment it reads, refuses it too.
        let swapped = try #require(await memory.file(named: "b.jpg"))
        #expect(try EncryptedFormatTests.pythonDecrypt(Array(swapped), attachmentId: "b", in: folder) == nil)
        #expect(try EncryptedFormatTests.pythonDecrypt(Array(swapped), attachmentId: "a", in: folder) == Array(first))
    }

    @Test("plain files stored before encryption was on: read only as the policy allows, and never instead of a hash")
    func plaintextReadsPolicy() async throws {
        let folder = try TemporaryDirectory()
        let memory = InMemoryRemoteStorage()
        let old = Data("a photo stored before encryption was turned on".utf8)
        let oldRow = Self.attachment("old", old)
        try await memory.uploadFile(data: old, attachment: oldRow)
        let fresh = Data(repeating: 5, count: 4_000)
        let freshRow = Self.attachment("fresh", fresh)
        try await EncryptedRemoteStorage(wrapping: memory, keys: Self.keys).uploadFile(
            data: fresh, attachment: freshRow)
        let noHash = AttachmentSync.Attachment(id: "old", filename: "old.jpg", state: .queuedDownload)
        let wrongHash = AttachmentSync.Attachment(
            id: "old", filename: "old.jpg", state: .queuedDownload, contentHash: FileStreaming.sha256(Data([1])))

        /// What a download of `row` gives: the content, or `nil` when it was refused as an integrity mismatch.
        func read(_ policy: PlaintextReads, _ row: AttachmentSync.Attachment) async throws -> Data? {
            let remote = EncryptedRemoteStorage(wrapping: memory, keys: Self.keys, plaintextReads: policy)
            let target = URL(fileURLWithPath: folder.path("target-\(UUID().uuidString)"))
            do {
                let info = try await remote.downloadFile(attachment: row, into: target, from: 0) { _ in }
                let written = try Data(contentsOf: target)
                #expect(info.writtenSHA256 == FileStreaming.sha256(written))
                #expect(try await remote.downloadFile(attachment: row) == written, "both download paths agree")
                return written
            } catch let error as AttachmentError where error.code == .integrityMismatch {
                #expect(!FileManager.default.fileExists(atPath: target.path), "nothing refused is left")
                await #expect(throws: AttachmentError.self) { _ = try await remote.downloadFile(attachment: row) }
                return nil
            }
        }

        // The default refuses every plain file.
        #expect(try await read(.refused, oldRow) == nil)
        #expect(try await read(.refused, freshRow) == fresh)
        // Verified by the row's hash: only with a hash, and only the right one.
        #expect(try await read(.verifiedByContentHash, oldRow) == old)
        #expect(try await read(.verifiedByContentHash, noHash) == nil)
        #expect(try await read(.verifiedByContentHash, wrongHash) == nil)
        #expect(try await read(.verifiedByContentHash, freshRow) == fresh, "encrypted files decrypt as always")
        // The app's own rule: the rows it names, still checked against a hash when they carry one.
        let onlyOld = PlaintextReads.allowed { $0.id == "old" }
        #expect(try await read(onlyOld, noHash) == old)
        #expect(try await read(onlyOld, wrongHash) == nil)
        #expect(try await read(onlyOld, freshRow) == fresh)
        let freshSealed = try #require(await memory.file(named: "fresh.jpg"))
        // A plain file served in place of an attachment the rule does not name is refused.
        await memory.setFile(old, named: "fresh.jpg")
        #expect(
            try await read(
                onlyOld, AttachmentSync.Attachment(id: "fresh", filename: "fresh.jpg", state: .queuedDownload)) == nil)
        // A file that starts like an encrypted one is read as one whatever the policy: damaged, it is refused.
        var damaged = freshSealed
        damaged[damaged.count - 40] ^= 1
        await memory.setFile(damaged, named: "old.jpg")
        #expect(try await read(onlyOld, noHash) == nil)
        #expect(try await read(.allowed { _ in true }, noHash) == nil)
    }

    @Test("an app turning encryption on: another device reads the old plain file and the new encrypted one, byte-exact")
    func mixedTableThroughTheQueue() async throws {
        let memory = InMemoryRemoteStorage()
        await memory.setCreateOnly(true)
        let before = try QueueHarness(remote: memory)
        let old = Data(repeating: 4, count: 30_000)
        let oldPhoto = try await before.queue.saveFile(data: old, mediaType: "image/jpeg", fileExtension: "jpg")
        try await before.queue.syncNow()
        await before.queue.close()
        let after = try QueueHarness(remote: EncryptedRemoteStorage(wrapping: memory, keys: Self.keys))
        let fresh = Data(repeating: 6, count: 30_000)
        let freshPhoto = try await after.queue.saveFile(data: fresh, mediaType: "image/jpeg", fileExtension: "jpg")
        try await after.queue.syncNow()
        #expect(try #require(await memory.file(named: oldPhoto.filename)) == old, "the old file stays plain")
        #expect(try #require(await memory.file(named: freshPhoto.filename)).starts(with: Data("ASE".utf8)))

        let oldId = oldPhoto.id
        let reader = try QueueHarness(
            watch: true,
            remote: EncryptedRemoteStorage(
                wrapping: memory, keys: Self.keys, plaintextReads: .allowed { $0.id == oldId }))
        try await reader.queue.startSync()
        try await reader.addChecklist("c1", photo: oldPhoto.id)
        try await reader.addChecklist("c2", photo: freshPhoto.id)
        try await reader.waitForState(oldPhoto.id, .synced)
        try await reader.waitForState(freshPhoto.id, .synced)
        #expect(reader.bytesOnDisk(oldPhoto.filename) == old)
        #expect(reader.bytesOnDisk(freshPhoto.filename) == fresh)
        await after.queue.close()
        await reader.queue.close()
    }

    @Test(
        "an interrupted download resumes the ciphertext where it stopped; one that waited for its key downloads nothing again",
        // Decrypted in memory once downloaded, and decrypted as it arrives.
        arguments: [300_000, 3_000_000])
    func downloadsResume(size: Int) async throws {
        let folder = try TemporaryDirectory()
        let memory = InMemoryRemoteStorage()
        let writer = EncryptedRemoteStorage(wrapping: memory, keys: Self.keys)
        var random = SplitMix64(seed: 31)
        let content = Data((0..<size).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        let photo = Self.attachment("photo", content)
        try await writer.uploadFile(data: content, attachment: photo)
        let total = Int64(try #require(await memory.file(named: "photo.jpg")).count)
        let partial = URL(fileURLWithPath: folder.path(".attachment-sync-download-photo.jpg"))
        let sealed = folder.path(".attachment-sync-etag-.attachment-sync-download-photo.jpg")

        // Cut at 100,000 bytes of ciphertext.
        await memory.holdDownloads(atByte: 100_000)
        let cut = Task { try await writer.downloadFile(attachment: photo, into: partial, from: 0) { _ in } }
        await memory.waitForHeldDownload()
        cut.cancel()
        _ = await cut.result
        await memory.holdDownloads(atByte: nil)
        #expect(try FileManager.default.attributesOfItem(atPath: sealed)[.size] as? Int == 100_000)
        let served = await memory.bytesServed
        let info = try await writer.downloadFile(attachment: photo, into: partial, from: 0) { _ in }
        #expect(await memory.bytesServed - served == total - 100_000, "only the rest was fetched")
        #expect(try Data(contentsOf: partial) == content)
        #expect(info.writtenSHA256 == photo.contentHash)
        #expect(!FileManager.default.fileExists(atPath: sealed), "the ciphertext is removed once decrypted")

        // Without the key the ciphertext stays; with it, nothing is fetched again.
        try FileManager.default.removeItem(at: partial)
        let keys = ChangingKeys()
        let reader = EncryptedRemoteStorage(wrapping: memory, keys: keys)
        await #expect(throws: AttachmentError.self) {
            _ = try await reader.downloadFile(attachment: photo, into: partial, from: 0) { _ in }
        }
        #expect(try FileManager.default.attributesOfItem(atPath: sealed)[.size] as? Int64 == total)
        keys.keys.withLock { $0["k1"] = EncryptedFormatTests.keys["k1"] }
        let before = await memory.bytesServed
        _ = try await reader.downloadFile(attachment: photo, into: partial, from: 0) { _ in }
        #expect(await memory.bytesServed == before)
        #expect(try Data(contentsOf: partial) == content)

        // A damaged ciphertext is not kept: the next try fetches the object again.
        var damaged = try #require(await memory.file(named: "photo.jpg"))
        damaged[200_000] ^= 1
        await memory.setFile(damaged, named: "photo.jpg")
        await #expect(throws: AttachmentError.self) {
            _ = try await reader.downloadFile(attachment: photo, into: partial, from: 0) { _ in }
        }
        #expect(!FileManager.default.fileExists(atPath: sealed))
    }

    @Test(
        "an encrypted download interrupted by a restart keeps the content decrypted and freed behind it, and fetches only the rest"
    )
    func interruptedQueueDownloadResumesFromContent() async throws {
        let folder = try TemporaryDirectory()
        try #require(try EncryptedFollowTests.punchesHoles(in: folder), "the test folder's file system punches holes")
        let memory = InMemoryRemoteStorage()
        let remote = EncryptedRemoteStorage(
            wrapping: memory, keys: Self.keys, segmentSize: EncryptedFormat.defaultSegmentSize,
            freeingInterval: 256 << 10)
        let content = testBytes(3_000_000, seed: 12)
        try await remote.uploadFile(
            data: content,
            attachment: AttachmentSync.Attachment(
                id: "v", filename: "v.bin", state: .queuedUpload, size: Int64(content.count),
                contentHash: FileStreaming.sha256(content)))
        let total = Int64(try #require(await memory.file(named: "v.bin")).count)
        let first = try QueueHarness(
            folder: folder, remote: remote, customWatch: CustomWatch(make: watchPhotosWithMediaTypes)
        ) { $0.downloadPolicy = .onDemand }
        try await first.queue.startSync()
        try await first.addChecklist("c1", photo: "v", mediaType: "video/mp4")
        try await first.waitForState("v", .synced)
        await memory.holdDownloads(atByte: 2_000_000)
        let queue = first.queue
        let interrupted = Task { try await queue.download(attachmentId: "v") }
        await memory.waitForHeldDownload()
        // The ciphertext received is decrypted while the download is held, and freed behind the content.
        let sealed =
            first.attachmentsPath + "/" + FileName.resumeValidatorName(for: FileName.downloadingName(for: "v.bin"))
        try await waitUntil("the ciphertext decrypted to be freed") {
            (0..<600_000).contains(EncryptedFollowTests.allocatedBytes(sealed))
        }
        // The app goes away mid-download.
        await first.close()
        _ = await interrupted.result
        let kept = try #require(first.fileSize(FileName.downloadingName(for: "v.bin")))
        #expect(kept >= 1_500_000, "the content decrypted is kept: \(kept) bytes")

        await memory.release()
        let second = try QueueHarness(
            folder: folder, remote: remote, customWatch: CustomWatch(make: watchPhotosWithMediaTypes)
        ) { $0.downloadPolicy = .onDemand }
        let fetched = try await second.queue.download(attachmentId: "v")
        #expect(fetched.contentAvailable)
        #expect(second.bytesOnDisk("v.bin") == content)
        #expect(await memory.bytesServed == total, "2,000,000 bytes before the restart, the rest after")
        let left = try FileManager.default.contentsOfDirectory(atPath: second.attachmentsPath)
            .filter { $0.hasPrefix(".attachment-sync-etag") || $0.hasPrefix(".attachment-sync-download") }
        #expect(left.isEmpty, "nothing of the download is left: \(left)")
        await second.close()
    }

    @Test(
        "a file changed after it was saved is not uploaded: the content must be the record's, small or large",
        arguments: [10_000, 3 * 1_048_576])
    func changedFileIsNotUploaded(size: Int) async throws {
        let folder = try TemporaryDirectory()
        let memory = InMemoryRemoteStorage()
        let remote = EncryptedRemoteStorage(wrapping: memory, keys: Self.keys)
        let saved = Data(repeating: 1, count: size)
        let photo = Self.attachment("photo", saved)
        let file = URL(fileURLWithPath: folder.path("photo.jpg"))
        var changed = saved
        changed[size / 2] = 2
        try changed.write(to: file)
        do {
            try await remote.uploadFile(fileURL: file, attachment: photo) { _ in }
            Issue.record("a changed file was uploaded")
        } catch let error as AttachmentError {
            #expect(error.code == .integrityMismatch)
        }
        await #expect(throws: AttachmentError.self) { try await remote.uploadFile(data: changed, attachment: photo) }
        #expect(await memory.file(named: "photo.jpg") == nil, "nothing uploaded")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix(".") }
        #expect(leftovers.isEmpty)
        // The saved content goes.
        try saved.write(to: file)
        try await remote.uploadFile(fileURL: file, attachment: photo) { _ in }
        let stored = try #require(await memory.file(named: "photo.jpg"))
        #expect(
            try EncryptedFormatTests.pythonDecrypt(Array(stored), attachmentId: "photo", in: folder) == Array(saved))
    }

    /// A provider whose keys can be added while the queue runs.
    final class ChangingKeys: KeyProvider {
        let keys = LockedValue<[String: SymmetricKey]>([:])
        func currentKeyId() async throws -> String { "k1" }
        func key(id: String) async throws -> SymmetricKey? { keys.withLock { $0[id] } }
    }

    @Test("without its key an upload waits, with a typed error naming the key and no attempt spent; with it, it goes")
    func missingKeyWaits() async throws {
        let memory = InMemoryRemoteStorage()
        let keys = ChangingKeys()
        let remote = EncryptedRemoteStorage(wrapping: memory, keys: keys)
        do {
            try await remote.uploadFile(data: Data([1]), attachment: Self.attachment("x", Data([1])))
            Issue.record("uploaded without a key")
        } catch let error as AttachmentError {
            #expect(error.code == .keyUnavailable)
            #expect(error.name == "k1")
        }

        let harness = try QueueHarness(remote: remote) { $0.maxAttempts = 1 }
        let content = Data(repeating: 3, count: 10_000)
        let photo = try await harness.queue.saveFile(data: content, mediaType: "image/jpeg", fileExtension: "jpg")
        try await harness.queue.syncNow()
        let waiting = try #require(try await harness.queue.attachment(id: photo.id))
        #expect(waiting.state == .queuedUpload, "not given up with maxAttempts 1")
        #expect(waiting.givenUp == nil)
        #expect(await memory.file(named: photo.filename) == nil)
        // A state of its own: waiting for a key, not for the network.
        let status = try #require(await harness.queue.status.first { _ in true })
        #expect(status.waitingForKeys.map(\.attachmentId) == [photo.id])
        #expect(status.waitingForKeys.first?.keyFailures == 1)
        #expect(status.waitingForKeys.first?.attempts == 0, "no attempt spent")
        #expect(status.waitingForKeys.first?.lastError?.contains("\"k1\"") == true, "the error names the key id")
        #expect(status.waitingForNetwork.isEmpty)
        #expect(status.givenUp.isEmpty)
        // Brought forward while the key is still missing: it waits again (its backoff started over), still
        // no attempt spent.
        #expect(try await harness.queue.keysDidChange() == 1)
        try await harness.queue.syncNow()
        let again = try #require(await harness.queue.status.first { _ in true }?.waitingForKeys.first)
        #expect(again.keyFailures == 1)
        #expect(again.attempts == 0)

        keys.keys.withLock { $0["k1"] = EncryptedFormatTests.keys["k1"] }
        #expect(try await harness.queue.keysDidChange() == 1, "the waiting upload is brought forward")
        try await harness.queue.syncNow()
        #expect(try await harness.queue.attachment(id: photo.id)?.state == .synced)
        #expect(await harness.queue.status.first { _ in true }?.waitingForKeys.isEmpty == true)
        let stored = try #require(await memory.file(named: photo.filename))
        #expect(stored.starts(with: Data("ASE".utf8)))
        await harness.queue.close()
    }

    @Test(
        "two devices with the same keys: one saves, the other downloads the content byte-exact; the remote saw only ciphertext"
    )
    func twoDevices() async throws {
        let memory = InMemoryRemoteStorage()
        await memory.setCreateOnly(true)
        let a = try QueueHarness(remote: EncryptedRemoteStorage(wrapping: memory, keys: Self.keys))
        let b = try QueueHarness(watch: true, remote: EncryptedRemoteStorage(wrapping: memory, keys: Self.keys))
        var random = SplitMix64(seed: 9)
        let content = Data((0..<200_000).map { _ in UInt8(truncatingIfNeeded: random.next()) })
        let photo = try await a.queue.saveFile(data: content, mediaType: "image/jpeg", fileExtension: "jpg")
        try await a.queue.syncNow()
        #expect(try await a.queue.attachment(id: photo.id)?.state == .synced)
        let stored = try #require(await memory.file(named: photo.filename))
        #expect(stored.range(of: content.prefix(64)) == nil)

        try await b.queue.startSync()
        try await b.addChecklist("c1", photo: photo.id)
        try await b.waitForState(photo.id, .synced)
        #expect(b.bytesOnDisk(photo.filename) == content)
        await a.queue.close()
        await b.queue.close()
    }
}
