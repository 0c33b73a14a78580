import AttachmentSyncTesting
import Foundation
import Testing

@testable import AttachmentSync

/// Two devices sharing a folder remote, as in the seed docs' inspection checklist: real SQLite files, real
/// attachment folders, a real remote folder, background sync on.
@Suite("Two devices over a folder remote", .cleansUp)
struct TwoDeviceIntegrationTests {
    @Test("A's photos reach B; A's delete removes the remote copy; B archives its copy")
    func checklistRoundTrip() async throws {
        let shared = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: shared.path("remote"))
        let deviceA = try QueueHarness(watch: true, remote: remote)
        let deviceB = try QueueHarness(watch: true, remote: remote)
        defer {
            Task {
                await deviceA.close()
                await deviceB.close()
            }
        }
        try await deviceA.queue.startSync()
        try await deviceB.queue.startSync()

        var photos: [String: Data] = [:]
        for n in 0..<12 {
            let checklist = "c\(n)"
            try await deviceA.addChecklist(checklist, photo: nil)
            let bytes = testBytes(1000 + n * 777, seed: UInt8(n))
            let saved = try await deviceA.queue.saveFile(data: bytes, mediaType: "image/jpeg", fileExtension: "jpg") {
                tx, attachment in
                try tx.execute(
                    sql: "UPDATE checklists SET photo_id = ?, completed = 1 WHERE id = ?",
                    arguments: [attachment.id, checklist])
            }
            photos[saved.id] = bytes
        }
        for id in photos.keys { try await deviceA.waitForState(id, .synced) }
        for (id, bytes) in photos {
            #expect(FileManager.default.contents(atPath: shared.path("remote/\(id).jpg")) == bytes)
        }

        // Row sync stand-in: copy A's checklists to B.
        let rows = try await deviceA.db.getAll(sql: "SELECT id, photo_id FROM checklists") {
            (try $0.getString(name: "id"), try $0.getString(name: "photo_id"))
        }
        try await deviceB.db.writeTransaction { tx in
            for (id, photo) in rows {
                try tx.execute(
                    sql: "INSERT INTO checklists (id, completed, photo_id) VALUES (?, 1, ?)", arguments: [id, photo])
            }
        }
        for id in photos.keys { try await deviceB.waitForState(id, .synced) }
        for (id, bytes) in photos {
            #expect(deviceB.bytesOnDisk("\(id).jpg") == bytes)
        }

        // A deletes one photo and clears its reference; the change reaches B.
        let (deletedChecklist, deletedPhoto) = try #require(rows.first)
        try await deviceA.queue.deleteFile(attachmentId: deletedPhoto) { tx, attachment in
            try tx.execute(sql: "UPDATE checklists SET photo_id = NULL WHERE photo_id = ?", arguments: [attachment.id])
        }
        try await deviceA.waitForState(deletedPhoto, nil)
        #expect(!FileManager.default.fileExists(atPath: shared.path("remote/\(deletedPhoto).jpg")))
        #expect(deviceA.bytesOnDisk("\(deletedPhoto).jpg") == nil)

        try await deviceB.setPhoto(checklist: deletedChecklist, photo: nil)
        try await deviceB.waitForState(deletedPhoto, .archived)
        #expect(deviceB.bytesOnDisk("\(deletedPhoto).jpg") == photos[deletedPhoto], "B keeps its copy as cache")
        #expect(try await deviceB.queue.attachments(in: .synced).count == photos.count - 1)
        let remoteFiles = try FileManager.default.contentsOfDirectory(atPath: shared.path("remote"))
        #expect(remoteFiles.filter { !$0.hasPrefix(".") }.count == photos.count - 1)
        #expect(
            remoteFiles.filter { $0.hasPrefix(".attachment-sync-sha256-") }.count == photos.count - 1,
            "each remote file keeps its SHA-256 beside it, and the deleted one's went with it")
    }

    @Test("a queue reopened on the same files resumes: pending uploads finish after a restart")
    func resumesAfterRestart() async throws {
        let folder = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: folder.path("remote"))
        let first = try QueueHarness(folder: folder, remote: remote)
        var ids: [String] = []
        for n in 0..<5 {
            ids.append(
                try await first.queue.saveFile(
                    data: testBytes(100, seed: UInt8(n)), mediaType: nil, fileExtension: "bin"
                ).id)
        }
        await first.close()  // never synced

        let second = try QueueHarness(folder: folder, remote: remote)
        try await second.queue.startSync()
        for id in ids { try await second.waitForState(id, .synced) }
        for (n, id) in ids.enumerated() {
            #expect(
                FileManager.default.contents(atPath: folder.path("remote/\(id).bin")) == testBytes(100, seed: UInt8(n)))
        }
    }
}
