import AttachmentSync
import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@Suite("Repairing local files", .cleansUp)
struct RepairTests {
    @Test("damaged or missing uploaded content is fetched again; the only copy and stray files are left alone")
    func repair() async throws {
        let device = try QueueHarness(watch: true)
        let original = testBytes(5_000)
        for (id, bytes) in [("damaged", original), ("missing", testBytes(700)), ("fine", testBytes(900))] {
            _ = try await device.queue.saveFile(data: bytes, mediaType: nil, fileExtension: "jpg", id: id) { tx, a in
                try tx.execute(
                    sql: "INSERT INTO checklists (id, description, completed, photo_id) VALUES (?, 'x', 0, ?)",
                    arguments: ["c-\(id)", a.id])
            }
        }
        try await device.queue.syncNow()
        let onlyCopy = try await device.queue.saveFile(
            data: testBytes(300), mediaType: nil, fileExtension: "jpg", id: "unsent")
        let folder = URL(fileURLWithPath: device.folder.path("attachments"))
        var bytes = try Data(contentsOf: folder.appendingPathComponent("damaged.jpg"))
        bytes[42] ^= 0x01
        try bytes.write(to: folder.appendingPathComponent("damaged.jpg"))
        try FileManager.default.removeItem(at: folder.appendingPathComponent("missing.jpg"))
        var unsent = try Data(contentsOf: URL(fileURLWithPath: try #require(onlyCopy.localUri)))
        unsent[0] ^= 0x01
        try unsent.write(to: URL(fileURLWithPath: try #require(onlyCopy.localUri)))
        try Data("mine".utf8).write(to: folder.appendingPathComponent("notes.txt"))

        let repair = try await device.queue.repairLocalFiles()
        #expect(repair.verification.findings.count == 4)
        #expect(repair.refetched.sorted() == ["damaged", "missing"])
        #expect(repair.leftAlone.map(\.file).sorted() == ["notes.txt", "unsent.jpg"])
        #expect(try await device.state(of: "damaged") == .queuedDownload)
        #expect(device.bytesOnDisk("unsent.jpg") == unsent, "the only copy is never removed, damaged or not")

        // Put the only copy right again before its upload (a damaged one is never uploaded: see below).
        unsent[0] ^= 0x01
        try unsent.write(to: URL(fileURLWithPath: try #require(onlyCopy.localUri)))
        try await device.queue.syncNow()
        #expect(device.bytesOnDisk("damaged.jpg") == original, "fetched again, verified against its hash")
        #expect(device.bytesOnDisk("missing.jpg") == testBytes(700))
        #expect(try await device.state(of: "damaged") == .synced)
        #expect(FileManager.default.fileExists(atPath: folder.appendingPathComponent("notes.txt").path))
        let again = try await device.queue.repairLocalFiles()
        #expect(again.refetched.isEmpty)
        #expect(again.verification.findings.map(\.file) == ["notes.txt"], "unsent is now uploaded and intact")
        await device.queue.close()
    }

    @Test("a local file changed after its save is not uploaded: the upload is given up and the file kept")
    func damagedOnlyCopyIsNotUploaded() async throws {
        let device = try QueueHarness()
        let remote = try device.memoryRemote
        let events = device.queue.events
        let saved = try await device.queue.saveFile(data: testBytes(4_000), mediaType: nil, fileExtension: "jpg")
        let path = try #require(saved.localUri)
        var bytes = try Data(contentsOf: URL(fileURLWithPath: path))
        bytes[7] ^= 0x80
        try bytes.write(to: URL(fileURLWithPath: path))

        try await device.queue.syncNow()
        #expect(await remote.file(named: saved.filename) == nil, "wrong bytes never reach remote storage")
        let record = try #require(try await device.queue.attachment(id: saved.id))
        #expect(record.state == .archived)
        #expect(record.givenUp == .queuedUpload)
        #expect(try Data(contentsOf: URL(fileURLWithPath: path)) == bytes, "the file is kept as it is")
        await device.queue.close()  // ends the event stream after what was sent
        var gaveUp: AttachmentError?
        for await event in events {
            if case .gaveUp(let id, let error, _) = event, id == saved.id {
                gaveUp = error
                break
            }
        }
        #expect(gaveUp?.code == .integrityMismatch)
    }
}
