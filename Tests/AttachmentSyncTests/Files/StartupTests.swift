import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

@Suite("Startup verification", .cleansUp)
struct StartupTests {
    /// Makes a device with one synced attachment (downloaded) and one upload that never ran, then closes it.
    func preparedFolder() async throws -> (TemporaryDirectory, InMemoryRemoteStorage, uploadId: String) {
        let folder = try TemporaryDirectory()
        let remote = InMemoryRemoteStorage()
        await remote.setFile(testBytes(10, seed: 1), named: "p1.jpg")
        let first = try QueueHarness(watch: true, folder: folder, remote: remote)
        try await first.addChecklist("c1", photo: "p1")
        try await first.queue.startSync()
        try await first.waitForState("p1", .synced)
        await first.queue.stopSync()
        let upload = try await first.queue.saveFile(data: testBytes(10, seed: 2), mediaType: nil, fileExtension: "jpg")
        await first.close()
        return (folder, remote, upload.id)
    }

    @Test(
        "a synced file that went missing is downloaded again; a lost upload is archived",
        arguments: [StartupFileCheck.beforeReady, .inBackground])
    func missingFiles(check: StartupFileCheck) async throws {
        let (folder, remote, uploadId) = try await preparedFolder()
        let attachments = folder.url.appendingPathComponent("attachments")
        try FileManager.default.removeItem(at: attachments.appendingPathComponent("p1.jpg"))
        try FileManager.default.removeItem(at: attachments.appendingPathComponent("\(uploadId).jpg"))

        let device = try QueueHarness(watch: true, folder: folder, remote: remote) { $0.startupFileCheck = check }
        try await device.queue.waitForInit()
        // Queued records are checked before the queue is ready, in both modes.
        #expect(try await device.state(of: uploadId) == .archived)
        #expect(try await device.queue.attachment(id: uploadId)?.localUri == nil)
        try await device.queue.waitForStartupCheck()
        #expect(try await device.state(of: "p1") == .queuedDownload)

        try await device.queue.syncNow()
        #expect(try await device.state(of: "p1") == .synced)
        #expect(device.bytesOnDisk("p1.jpg") == testBytes(10, seed: 1))
        #expect(await remote.uploadCount == 0, "a lost upload is never uploaded")
    }

    @Test(
        "among thousands of files, startup finds exactly the missing ones and the leftovers",
        arguments: [StartupFileCheck.beforeReady, .inBackground])
    func manyRecordsOneListing(check: StartupFileCheck) async throws {
        let folder = try TemporaryDirectory()
        let attachments = folder.url.appendingPathComponent("attachments")
        try FileManager.default.createDirectory(at: attachments, withIntermediateDirectories: true)
        let count = 3_000
        let first = try QueueHarness(folder: folder)
        try await first.queue.waitForInit()
        var random = SplitMix64(seed: 5)
        let ids = (0..<count).map { String(format: "r%05d", $0) }
        let states: [AttachmentState] = ids.map { _ in
            [.synced, .queuedUpload, .archived].randomElement(using: &random)!
        }
        try await first.db.writeTransaction { tx in
            for (id, state) in zip(ids, states) {
                try tx.execute(
                    sql: "INSERT INTO attachments (id, filename, state, timestamp, has_synced, local_uri, size) "
                        + "VALUES (?, ?, ?, 1, ?, ?, 1)",
                    parameters: [id, id + ".jpg", state.rawValue, state != .queuedUpload, id + ".jpg"])
            }
        }
        for id in ids { try Data("x".utf8).write(to: attachments.appendingPathComponent(id + ".jpg")) }
        await first.close()
        let missing = Set((0..<12).map { _ in ids.randomElement(using: &random)! })
        for id in missing { try FileManager.default.removeItem(at: attachments.appendingPathComponent(id + ".jpg")) }
        let leftovers = [".attachment-sync-tmp-x", UUID().uuidString.lowercased() + ".jpg"]
        for name in leftovers { try Data("y".utf8).write(to: attachments.appendingPathComponent(name)) }

        let device = try QueueHarness(folder: folder) { $0.startupFileCheck = check }
        try await device.queue.waitForStartupCheck()
        let records = Dictionary(uniqueKeysWithValues: try await device.queue.allAttachments().map { ($0.id, $0) })
        for (id, state) in zip(ids, states) {
            let record = try #require(records[id])
            if missing.contains(id) {
                let expected: AttachmentState = [.synced: .queuedDownload, .queuedUpload: .archived][state] ?? state
                #expect(record.state == expected, "\(id) was \(state)")
                #expect(record.localUri == nil, "\(id)")
            } else {
                #expect(record.state == state, "\(id)")
                #expect(record.localUri?.hasSuffix("/\(id).jpg") == true, "\(id)")
            }
        }
        let names = try device.filesOnDisk()
        #expect(names == Set(ids.filter { !missing.contains($0) }.map { $0 + ".jpg" }))
    }

    @Test(
        "leftovers are removed, the user's own files are left alone",
        arguments: [StartupFileCheck.beforeReady, .inBackground])
    func cleansLeftovers(check: StartupFileCheck) async throws {
        let (folder, remote, uploadId) = try await preparedFolder()
        let attachments = folder.url.appendingPathComponent("attachments")
        let orphan = "\(UUID().uuidString.lowercased()).jpg"
        let leftovers = [".attachment-sync-tmp-123", ".attachment-sync-download-p9.jpg", orphan]
        let foreign = ["notes.txt", "photo-of-cat.jpg", ".DS_Store"]
        for name in leftovers + foreign {
            try Data("x".utf8).write(to: attachments.appendingPathComponent(name))
        }
        try FileManager.default.createDirectory(
            at: attachments.appendingPathComponent("albums"), withIntermediateDirectories: true)

        let device = try QueueHarness(watch: true, folder: folder, remote: remote) { $0.startupFileCheck = check }
        try await device.queue.waitForStartupCheck()

        #expect(try device.filesOnDisk() == Set(["p1.jpg", "\(uploadId).jpg", "albums"] + foreign))
    }

    @Test(
        "a save interrupted after its commit is completed from its staging file",
        arguments: [StartupFileCheck.beforeReady, .inBackground])
    func completesInterruptedSave(check: StartupFileCheck) async throws {
        let (folder, remote, uploadId) = try await preparedFolder()
        let attachments = folder.url.appendingPathComponent("attachments")
        try FileManager.default.moveItem(
            at: attachments.appendingPathComponent("\(uploadId).jpg"),
            to: attachments.appendingPathComponent(".attachment-sync-save-\(uploadId).jpg"))

        let device = try QueueHarness(watch: true, folder: folder, remote: remote) { $0.startupFileCheck = check }
        try await device.queue.syncNow()
        #expect(try await device.state(of: uploadId) == .synced)
        #expect(await remote.file(named: "\(uploadId).jpg") == testBytes(10, seed: 2))
        #expect(!(try device.filesOnDisk().contains(".attachment-sync-save-\(uploadId).jpg")))
    }

    @Test(
        "an absolute local_uri from an older database becomes relative",
        arguments: [StartupFileCheck.beforeReady, .inBackground])
    func absolutePathsBecomeRelative(check: StartupFileCheck) async throws {
        let (folder, remote, _) = try await preparedFolder()
        let absolute = folder.url.appendingPathComponent("attachments/p1.jpg").path
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: QueueHarness.schema)
        try await db.execute(sql: "UPDATE attachments SET local_uri = ? WHERE id = 'p1'", parameters: [absolute])
        try await db.close()

        let device = try QueueHarness(watch: true, folder: folder, remote: remote) { $0.startupFileCheck = check }
        try await device.queue.waitForStartupCheck()
        let stored = try await device.db.get(sql: "SELECT local_uri FROM attachments WHERE id = 'p1'") {
            try $0.getString(name: "local_uri")
        }
        #expect(stored == "p1.jpg")
        #expect(try await device.state(of: "p1") == .synced)
    }

    @Test("a missing attachments table is a typed error naming it")
    func missingTable() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: Schema(tables: []))
        defer { try? db.close() }
        let queue = AttachmentQueue(
            db: db, attachmentsDirectory: folder.path("files"), remoteStorage: InMemoryRemoteStorage())
        let error = await #expect(throws: AttachmentError.self) { try await queue.startSync() }
        #expect(error?.code == .invalidConfiguration)
        #expect(error?.name == "attachments")
    }
}

@Suite("Names that reach the file system", .cleansUp)
struct ValidationTests {
    static let badNames = [
        "../evil", "a/b", "a\\b", "..", ".", "", "nul\u{0}byte", "line\nbreak", String(repeating: "x", count: 201),
    ]

    @Test("a bad id or extension is a typed error and nothing is written anywhere", arguments: badNames)
    func badIdsAndExtensions(name: String) async throws {
        let device = try QueueHarness()
        try await device.queue.waitForInit()
        let before = try FileManager.default.contentsOfDirectory(atPath: device.folder.path)

        let idError = await #expect(throws: AttachmentError.self) {
            try await device.queue.saveFile(data: Data("x".utf8), mediaType: nil, fileExtension: "jpg", id: name)
        }
        #expect(idError?.code == .invalidName)
        #expect(idError?.name == name || idError?.name == "\(name).jpg")
        if !name.isEmpty, name != "." {
            let extError = await #expect(throws: AttachmentError.self) {
                try await device.queue.saveFile(data: Data("x".utf8), mediaType: nil, fileExtension: name, id: "ok")
            }
            #expect(extError?.code == .invalidName)
        }

        #expect(try FileManager.default.contentsOfDirectory(atPath: device.folder.path) == before)
        #expect(try device.filesOnDisk().isEmpty)
        #expect(try await device.queue.allAttachments().isEmpty)
    }

    @Test("a watched item with a bad id or filename is skipped; the others are downloaded")
    func badWatchedItems() async throws {
        let device = try QueueHarness(watch: true)
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(10), named: "good.jpg")
        try await device.addChecklist("c1", photo: "../../etc/passwd")
        try await device.addChecklist("c2", photo: "good")
        try await device.queue.startSync()
        try await device.waitForState("good", .synced)
        #expect(try await device.state(of: "../../etc/passwd") == nil)
        #expect(try device.filesOnDisk() == ["good.jpg"])
        #expect(await remote.downloadCount == 1)
    }

    @Test("a bad subdirectory or option is reported at startup, naming it")
    func badConfiguration() async throws {
        let sub = try QueueHarness { $0.subdirectories = ["ok", "../outside"] }
        let subError = await #expect(throws: AttachmentError.self) { try await sub.queue.waitForInit() }
        #expect(subError?.code == .invalidName)
        #expect(subError?.name == "../outside")
        #expect(!FileManager.default.fileExists(atPath: sub.folder.path("outside")))
        await sub.close()

        let negative = try QueueHarness { $0.archivedCacheLimit = -1 }
        let negativeError = await #expect(throws: AttachmentError.self) { try await negative.queue.startSync() }
        #expect(negativeError?.code == .invalidConfiguration)
        #expect(negativeError?.name == "archivedCacheLimit")
        await negative.close()

        let threshold = try QueueHarness { $0.startupFileCheck = .automatic(backgroundAbove: -1) }
        let thresholdError = await #expect(throws: AttachmentError.self) { try await threshold.queue.waitForInit() }
        #expect(thresholdError?.code == .invalidConfiguration)
        #expect(thresholdError?.name == "startupFileCheck")
        await threshold.close()
    }

    @Test("subdirectories are created inside the attachments directory")
    func createsSubdirectories() async throws {
        let device = try QueueHarness { $0.subdirectories = ["thumbnails", "originals"] }
        try await device.queue.waitForInit()
        #expect(try device.filesOnDisk() == ["thumbnails", "originals"])
    }

    @Test("the folder remote refuses filenames that would leave its folder")
    func folderRemoteValidates() async throws {
        let folder = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: folder.path("remote"))
        let error = await #expect(throws: AttachmentError.self) {
            try await remote.uploadFile(
                data: Data("x".utf8),
                attachment: AttachmentSync.Attachment(id: "a", filename: "../escape", state: .queuedUpload))
        }
        #expect(error?.code == .invalidName)
        #expect(!FileManager.default.fileExists(atPath: folder.path("escape")))
    }
}
