import AttachmentSyncTesting
import Foundation
import Testing

@testable import AttachmentSync

@Suite("saveFile and upload", .cleansUp)
struct SaveFileTests {
    @Test("saveFile writes the file, records queuedUpload with the metadata, runs the hook; upload syncs it")
    func saveThenUpload() async throws {
        let device = try QueueHarness()
        try await device.addChecklist("c1", photo: nil)
        let bytes = testBytes(70_000)

        let saved = try await device.queue.saveFile(
            data: bytes, mediaType: "image/jpeg", fileExtension: "jpg", metaData: #"{"room":"kitchen"}"#
        ) { tx, attachment in
            try tx.execute(sql: "UPDATE checklists SET photo_id = ? WHERE id = ?", arguments: [attachment.id, "c1"])
        }

        #expect(saved.state == .queuedUpload)
        #expect(saved.filename == "\(saved.id).jpg")
        #expect(saved.hasSynced == false)
        #expect(saved.size == 70_000)
        #expect(saved.localUri == (device.attachmentsPath as NSString).appendingPathComponent("\(saved.id).jpg"))
        #expect(device.bytesOnDisk("\(saved.id).jpg") == bytes)
        #expect(try device.filesOnDisk() == ["\(saved.id).jpg"])
        let photo = try await device.db.get(sql: "SELECT photo_id FROM checklists WHERE id = 'c1'") {
            try $0.getString(name: "photo_id")
        }
        #expect(photo == saved.id)
        let stored = try #require(try await device.queue.attachment(id: saved.id))
        #expect(stored.metaData == #"{"room":"kitchen"}"#)
        #expect(stored.mediaType == "image/jpeg")
        #expect(stored.contentHash == FileStreaming.sha256(bytes), "the SHA-256 is stored with the record")
        #expect(stored.contentHash?.count == 64)
        let relative = try await device.db.get(sql: "SELECT local_uri FROM attachments") {
            try $0.getString(name: "local_uri")
        }
        #expect(relative == "\(saved.id).jpg", "local_uri is stored relative to the attachments directory")

        try await device.queue.syncNow()

        let synced = try #require(try await device.queue.attachment(id: saved.id))
        #expect(synced.state == .synced)
        #expect(synced.hasSynced)
        #expect(synced.size == 70_000)
        #expect(try await device.memoryRemote.file(named: "\(saved.id).jpg") == bytes)
        #expect(device.bytesOnDisk("\(saved.id).jpg") == bytes, "the local copy stays after upload")
    }

    @Test("when the hook throws, no record, no file and no row change are left")
    func hookFailureLeavesNothing() async throws {
        struct HookFailure: Error {}
        let device = try QueueHarness()
        try await device.addChecklist("c1", photo: nil)

        await #expect(throws: HookFailure.self) {
            try await device.queue.saveFile(data: testBytes(1000), mediaType: "image/jpeg", fileExtension: "jpg") {
                tx, attachment in
                try tx.execute(sql: "UPDATE checklists SET photo_id = ? WHERE id = 'c1'", arguments: [attachment.id])
                throw HookFailure()
            }
        }

        #expect(try await device.queue.allAttachments().isEmpty)
        #expect(try device.filesOnDisk().isEmpty)
        let photo = try await device.db.get(sql: "SELECT photo_id FROM checklists WHERE id = 'c1'") {
            try $0.getStringOptional(name: "photo_id")
        }
        #expect(photo == nil)
        try await device.queue.syncNow()
        #expect(try await device.memoryRemote.uploadCount == 0)
    }

    @Test("an explicit id is used; a taken id is a typed error that keeps the first file")
    func explicitAndDuplicateIds() async throws {
        let device = try QueueHarness()
        let first = try await device.queue.saveFile(
            data: testBytes(10, seed: 1), mediaType: nil, fileExtension: "pdf", id: "invoice-7")
        #expect(first.id == "invoice-7")

        let error = await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(
                data: testBytes(10, seed: 2), mediaType: nil, fileExtension: "pdf", id: "invoice-7")
        }
        #expect(error?.code == .alreadyExists)
        #expect(device.bytesOnDisk("invoice-7.pdf") == testBytes(10, seed: 1))
        #expect(try device.filesOnDisk() == ["invoice-7.pdf"])
    }

    @Test("a generated id is a lowercase UUID and an extension's leading dot is dropped")
    func generatedIds() async throws {
        let device = try QueueHarness()
        let saved = try await device.queue.saveFile(
            data: Data("x".utf8), mediaType: "text/plain", fileExtension: ".txt")
        #expect(UUID(uuidString: saved.id) != nil)
        #expect(saved.id == saved.id.lowercased())
        #expect(saved.filename == "\(saved.id).txt")
    }

    @Test("an empty file round-trips")
    func emptyFile() async throws {
        let device = try QueueHarness()
        let saved = try await device.queue.saveFile(data: Data(), mediaType: nil, fileExtension: "bin")
        try await device.queue.syncNow()
        #expect(try await device.state(of: saved.id) == .synced)
        #expect(try await device.memoryRemote.file(named: saved.filename) == Data())
    }
}
