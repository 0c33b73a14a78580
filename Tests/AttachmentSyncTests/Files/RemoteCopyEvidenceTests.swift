import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// A local file is deleted on the grounds that "the remote has it" only when the remote, asked, confirms an
/// intact copy: repair, eviction, archive trim and purge.
@Suite("Remote copies confirmed before local ones go", .cleansUp)
struct RemoteCopyEvidenceTests {
    /// A device with one uploaded photo, `photo`, whose local file then gets one byte wrong.
    func damagedUploadedPhoto(remote: any RemoteStorageAdapter) async throws -> (QueueHarness, Data) {
        let device = try QueueHarness(remote: remote)
        let original = testBytes(5_000)
        _ = try await device.queue.saveFile(data: original, mediaType: nil, fileExtension: "jpg", id: "photo")
        try await device.queue.syncNow()
        #expect(try await device.state(of: "photo") == .synced)
        var damaged = original
        damaged[42] ^= 0x01
        try damaged.write(to: URL(fileURLWithPath: device.folder.path("attachments/photo.jpg")))
        return (device, damaged)
    }

    @Test("a damaged local file whose remote copy is gone is kept, and its record too: it may be all there is")
    func remoteLostTheFile() async throws {
        let memory = InMemoryRemoteStorage()
        let (device, damaged) = try await damagedUploadedPhoto(remote: memory)
        await memory.removeFile(named: "photo.jpg")
        await memory.setFile(testBytes(9), named: "other.jpg")  // the location exists

        let repair = try await device.queue.repairLocalFiles()
        #expect(repair.refetched.isEmpty)
        #expect(repair.leftAlone.map(\.file) == ["photo.jpg"])
        #expect(repair.reasons["photo.jpg"]?.contains("no file") == true, "\(repair.reasons)")
        #expect(device.bytesOnDisk("photo.jpg") == damaged, "the only copy, one byte off, is still here")
        #expect(try await device.state(of: "photo") == .synced)
    }

    @Test("a damaged local file whose remote copy is intact is deleted and fetched again")
    func remoteConfirms() async throws {
        let memory = InMemoryRemoteStorage()
        let (device, _) = try await damagedUploadedPhoto(remote: memory)
        let repair = try await device.queue.repairLocalFiles()
        #expect(repair.refetched == ["photo"] && repair.movedAside.isEmpty)
        try await device.queue.syncNow()
        #expect(device.bytesOnDisk("photo.jpg") == testBytes(5_000))
    }

    @Test("a remote that cannot describe its files: the damaged file is set aside, never deleted, and fetched")
    func remoteCannotBeAsked() async throws {
        let remote = SeedStyleRemote()
        let (device, damaged) = try await damagedUploadedPhoto(remote: remote)
        let repair = try await device.queue.repairLocalFiles()
        #expect(repair.refetched == ["photo"])
        let aside = try #require(repair.movedAside["photo"])
        #expect(aside.hasPrefix(device.folder.path("attachments/attachment-sync-damaged/")))
        #expect(FileManager.default.contents(atPath: aside) == damaged)
        try await device.queue.syncNow()
        #expect(device.bytesOnDisk("photo.jpg") == testBytes(5_000))
        // A restart's clean-up leaves the folder alone.
        await device.queue.close()
        let again = try QueueHarness(folder: device.folder, remote: remote)
        try await again.queue.waitForInit()
        #expect(FileManager.default.contents(atPath: aside) == damaged)
    }

    @Test("a remote that cannot be reached: the repair changes nothing")
    func remoteUnreachable() async throws {
        let memory = InMemoryRemoteStorage()
        let blind = DescribingFails(base: memory)
        let (device, damaged) = try await damagedUploadedPhoto(remote: blind)
        blind.failing.withLock { $0 = true }
        await #expect(throws: (any Error).self) { try await device.queue.repairLocalFiles() }
        #expect(device.bytesOnDisk("photo.jpg") == damaged)
        #expect(try await device.state(of: "photo") == .synced)
    }

    @Test("eviction, archive trim and purge keep a local file whose remote copy is gone")
    func evictionAsksFirst() async throws {
        let memory = InMemoryRemoteStorage()
        let device = try QueueHarness(watch: true, remote: memory) {
            $0.archivedCacheLimit = 0
        }
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: nil)
        let kept = try await device.queue.saveFile(
            data: testBytes(800), mediaType: nil, fileExtension: "jpg", id: "kept"
        ) { tx, attachment in
            try tx.execute(sql: "UPDATE checklists SET photo_id = ? WHERE id = 'c1'", arguments: [attachment.id])
        }
        try await device.waitForState(kept.id, .synced)
        let purged = try await device.queue.saveFile(
            data: testBytes(600), mediaType: nil, fileExtension: "jpg", id: "purged")
        try await device.waitForColumn("has_synced", of: purged.id, toBe: "1")
        await memory.removeFile(named: "kept.jpg")
        await memory.removeFile(named: "purged.jpg")

        // purge: refused, the file kept.
        let refused = await #expect(throws: AttachmentError.self) {
            try await device.queue.purge(attachmentId: "purged")
        }
        #expect(refused?.code == .invalidState, "\(String(describing: refused))")
        #expect(device.bytesOnDisk("purged.jpg") == testBytes(600))

        // The row lets go: archived, and beyond archivedCacheLimit 0; the trim keeps it.
        try await device.setPhoto(checklist: "c1", photo: nil)
        try await device.waitForState(kept.id, .archived)
        try await device.queue.expireCache()
        #expect(device.bytesOnDisk("kept.jpg") == testBytes(800), "the remote lost it: the local file stays")
        #expect(try await device.state(of: kept.id) == .archived)

        // Once the remote holds it again, the trim goes ahead.
        await memory.setFile(testBytes(800), named: "kept.jpg", sha256: FileStreaming.sha256(testBytes(800)))
        try await device.queue.expireCache()
        #expect(device.bytesOnDisk("kept.jpg") == nil)
        #expect(try await device.state(of: kept.id) == nil)
    }

    @Test("the verdict: size and stored SHA-256 must both be the record's; without a hash to compare, none")
    func verdicts() {
        var record = AttachmentRecord(
            id: "a", filename: "a.jpg", state: .synced, timestamp: 0, hasSynced: true, size: 3,
            contentHash: String(repeating: "ab", count: 32))
        func verdict(_ info: RemoteObjectInfo?) -> String {
            switch AttachmentQueue.evidence(info, for: record) {
            case .intact: "intact"
            case .notIntact: "notIntact"
            case .cannotAsk: "cannotAsk"
            case .unreachable: "unreachable"
            }
        }
        let hash = String(repeating: "ab", count: 32)
        #expect(verdict(RemoteObjectInfo(size: 3, sha256: hash)) == "intact")
        #expect(verdict(RemoteObjectInfo(size: 3, sha256: hash.uppercased())) == "intact")
        #expect(verdict(nil) == "notIntact")
        #expect(verdict(RemoteObjectInfo(size: 4, sha256: hash)) == "notIntact")
        #expect(verdict(RemoteObjectInfo(size: 3, sha256: String(repeating: "cd", count: 32))) == "notIntact")
        #expect(verdict(RemoteObjectInfo(size: 3, sha256: nil)) == "cannotAsk")
        #expect(verdict(RemoteObjectInfo(size: 3, sha256: "garbage")) == "cannotAsk")
        record.contentHash = nil
        #expect(verdict(RemoteObjectInfo(size: 3, sha256: nil)) == "intact")
        #expect(verdict(RemoteObjectInfo(size: nil, sha256: nil)) == "cannotAsk")
    }
}

/// The in-memory remote, whose descriptions fail (the network is gone) once `failing` is set.
final class DescribingFails: ListableRemoteStorage {
    let base: InMemoryRemoteStorage
    let failing = LockedValue(false)
    init(base: InMemoryRemoteStorage) { self.base = base }

    private func check() throws {
        if failing.withLock({ $0 }) { throw URLError(.notConnectedToInternet) }
    }
    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
        try await base.uploadFile(data: data, attachment: attachment)
    }
    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        try await base.downloadFile(attachment: attachment)
    }
    func deleteFile(attachment: AttachmentSync.Attachment) async throws {
        try await base.deleteFile(attachment: attachment)
    }
    func listFiles(after continuation: String?) async throws -> RemoteFileListing {
        try check()
        return try await base.listFiles(after: continuation)
    }
    func storedName(forFilename filename: String) throws -> String { try base.storedName(forFilename: filename) }
    func deleteListedFile(_ file: RemoteFile) async throws { try await base.deleteListedFile(file) }
    func fileInfo(attachment: AttachmentSync.Attachment) async throws -> RemoteObjectInfo? {
        try check()
        return try await base.fileInfo(attachment: attachment)
    }
}
