import AttachmentSyncTesting
import Foundation
import Testing

@testable import AttachmentSync

@Suite("deleteFile", .cleansUp)
struct DeleteFileTests {
    @Test("removes the local file, queues the delete with the hook in the same transaction, then deletes remotely")
    func deletesLocallyThenRemotely() async throws {
        let device = try QueueHarness()
        try await device.addChecklist("c1", photo: nil)
        let saved = try await device.queue.saveFile(data: testBytes(500), mediaType: "image/jpeg", fileExtension: "jpg")
        {
            tx, attachment in
            try tx.execute(sql: "UPDATE checklists SET photo_id = ? WHERE id = 'c1'", arguments: [attachment.id])
        }
        try await device.queue.syncNow()
        #expect(try await device.memoryRemote.file(named: saved.filename) != nil)

        try await device.queue.deleteFile(attachmentId: saved.id) { tx, attachment in
            #expect(attachment.state == .queuedDelete)
            try tx.execute(sql: "UPDATE checklists SET photo_id = NULL WHERE photo_id = ?", arguments: [attachment.id])
        }

        #expect(try device.filesOnDisk().isEmpty)
        let record = try #require(try await device.queue.attachment(id: saved.id))
        #expect(record.state == .queuedDelete)
        #expect(record.hasSynced == false)
        #expect(record.localUri == nil)
        let photo = try await device.db.get(sql: "SELECT photo_id FROM checklists WHERE id = 'c1'") {
            try $0.getStringOptional(name: "photo_id")
        }
        #expect(photo == nil)

        try await device.queue.syncNow()
        #expect(try await device.queue.attachment(id: saved.id) == nil)
        #expect(try await device.memoryRemote.file(named: saved.filename) == nil)
    }

    @Test("a missing id is a typed error")
    func missingId() async throws {
        let device = try QueueHarness()
        let error = await #expect(throws: AttachmentError.self) {
            try await device.queue.deleteFile(attachmentId: "nope") { _, _ in }
        }
        #expect(error?.code == .attachmentNotFound)
        #expect(error?.attachmentId == "nope")
    }

    @Test("when the hook throws nothing changes: the file and the record stay")
    func hookFailure() async throws {
        struct HookFailure: Error {}
        let device = try QueueHarness()
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        await #expect(throws: HookFailure.self) {
            try await device.queue.deleteFile(attachmentId: saved.id) { _, _ in throw HookFailure() }
        }
        #expect(try await device.state(of: saved.id) == .synced)
        #expect(device.bytesOnDisk(saved.filename) == testBytes(10))
    }

    @Test("a failing remote delete keeps the record queued, so the remote copy is never orphaned")
    func failingRemoteDeleteKeepsTheRecord() async throws {
        let device = try QueueHarness()
        let remote = try device.memoryRemote
        let saved = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        try await device.queue.syncNow()
        await remote.setAlwaysFailing(.delete, with: InMemoryRemoteStorage.offlineError)

        try await device.queue.deleteFile(attachmentId: saved.id) { _, _ in }
        try await device.queue.syncNow()
        #expect(try await device.state(of: saved.id) == .queuedDelete)
        #expect(await remote.file(named: saved.filename) != nil)

        await remote.setAlwaysFailing(.delete, with: nil)
        try await device.queue.syncNow()
        #expect(try await device.state(of: saved.id) == nil)
        #expect(await remote.file(named: saved.filename) == nil)
    }
}
