import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

@Suite("Watched attachments: download, archive, restore, evict", .cleansUp)
struct DownloadAndArchiveTests {
    @Test("a watched id not in the table is queued, downloaded and synced with the bytes on disk")
    func downloadsNewWatchedItems() async throws {
        let device = try QueueHarness(watch: true)
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(5000, seed: 9), named: "p1.jpg")

        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await device.waitForState("p1", .synced)

        let record = try #require(try await device.queue.attachment(id: "p1"))
        #expect(record.filename == "p1.jpg")
        #expect(record.hasSynced)
        #expect(record.size == 5000)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(5000, seed: 9))
        #expect(await remote.downloadCount == 1)
    }

    @Test("the item's filename, media type and metadata are honoured")
    func honoursItemFields() async throws {
        let folder = try TemporaryDirectory()
        let remote = InMemoryRemoteStorage()
        await remote.setFile(testBytes(300), named: "scan-0001.pdf")
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: QueueHarness.schema)
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: folder.path("files"))
        configuration.syncInterval = .zero
        configuration.syncThrottleDuration = .zero
        let queue = AttachmentQueue(db: db, remoteStorage: remote, configuration: configuration) {
            try db.watch(sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL") { cursor in
                try WatchedAttachmentItem(
                    id: cursor.getString(name: "photo_id"), filename: "scan-0001.pdf", metaData: #"{"pages":3}"#,
                    mediaType: "application/pdf")
            }
        }
        TestCleanup.add { await queue.close() }
        try await db.execute(sql: "INSERT INTO checklists (id, photo_id) VALUES ('c1', 'doc-1')")
        try await queue.startSync()
        let states = try db.watch(sql: "SELECT state FROM attachments WHERE id = 'doc-1'") {
            try $0.getInt(name: "state")
        }
        _ = try await withDeadline("doc-1 synced") {
            try await states.first { $0 == [AttachmentState.synced.rawValue] }
        }

        let record = try #require(try await queue.attachment(id: "doc-1"))
        #expect(record.filename == "scan-0001.pdf")
        #expect(record.mediaType == "application/pdf")
        #expect(record.metaData == #"{"pages":3}"#)
        #expect(FileManager.default.contents(atPath: try #require(record.localUri)) == testBytes(300))
    }

    @Test("with downloadAttachments off, records are made remote-only and nothing is downloaded")
    func downloadsOff() async throws {
        let device = try QueueHarness(watch: true) { $0.downloadAttachments = false }
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(10), named: "p1.jpg")
        try await device.addChecklist("c1", photo: "p1")
        try await device.queue.startSync()
        // The record is made, remote-only: on demand for everything.
        try await device.waitForState("p1", .synced)
        try await device.queue.syncNow()
        let record = try #require(try await device.queue.attachment(id: "p1"))
        #expect(!record.contentAvailable)
        #expect(record.isOnDemand)
        #expect(await remote.downloadCount == 0)
        #expect(try device.filesOnDisk().isEmpty)
    }

    @Test("an unwatched synced file is archived and kept; watched again, it is restored without a download")
    func archiveAndRestore() async throws {
        let device = try QueueHarness(watch: true)
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(100), named: "p1.jpg")
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await device.waitForState("p1", .synced)

        try await device.setPhoto(checklist: "c1", photo: nil)
        try await device.waitForState("p1", .archived)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(100), "archived files stay as a cache")

        try await device.setPhoto(checklist: "c1", photo: "p1")
        try await device.waitForState("p1", .synced)
        #expect(await remote.downloadCount == 1, "a cached file is restored, not downloaded again")
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(100))
    }

    @Test("archived files beyond the cache limit are evicted oldest first; remote copies stay")
    func evictsOldestArchived() async throws {
        let device = try QueueHarness(watch: true) { $0.archivedCacheLimit = 2 }
        let remote = try device.memoryRemote
        for n in 1...4 { await remote.setFile(testBytes(10, seed: UInt8(n)), named: "p\(n).jpg") }
        try await device.queue.startSync()
        for n in 1...4 { try await device.addChecklist("c\(n)", photo: "p\(n)") }
        for n in 1...4 { try await device.waitForState("p\(n)", .synced) }

        for n in 1...4 {
            try await device.setPhoto(checklist: "c\(n)", photo: nil)
            try await device.waitForState("p\(n)", .archived)
        }
        try await device.queue.expireCache()

        #expect(try await device.state(of: "p1") == nil)
        #expect(try await device.state(of: "p2") == nil)
        #expect(try await device.state(of: "p3") == .archived)
        #expect(try await device.state(of: "p4") == .archived)
        #expect(try device.filesOnDisk() == ["p3.jpg", "p4.jpg"])
        #expect(await remote.files.count == 4, "eviction never deletes remote copies")
        #expect(await remote.deleteCount == 0)
    }

    @Test("an evicted attachment watched again is downloaded again")
    func evictedComesBack() async throws {
        let device = try QueueHarness(watch: true) { $0.archivedCacheLimit = 0 }
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(10), named: "p1.jpg")
        try await device.queue.startSync()
        try await device.addChecklist("c1", photo: "p1")
        try await device.waitForState("p1", .synced)
        try await device.setPhoto(checklist: "c1", photo: nil)
        // With a limit of 0 the archived state may last only until the next pass trims it.
        try await device.waitForColumn("state", of: "p1", toBe: "\(AttachmentState.archived.rawValue)", orGone: true)
        try await device.queue.expireCache()
        #expect(try await device.state(of: "p1") == nil)
        #expect(try device.filesOnDisk().isEmpty)

        try await device.setPhoto(checklist: "c1", photo: "p1")
        try await device.waitForState("p1", .synced)
        #expect(await remote.downloadCount == 2)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(10))
    }
}
