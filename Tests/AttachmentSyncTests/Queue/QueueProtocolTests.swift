import AttachmentSyncTesting
import Foundation
import Testing

@testable import AttachmentSync

/// App code written against the protocol, as the docs' example would be: it never names `AttachmentQueue`.
private func attachPhoto(_ jpeg: Data, to checklist: String, with queue: any AttachmentQueueProtocol) async throws
    -> AttachmentSync.Attachment
{
    try await queue.saveFile(data: jpeg, mediaType: "image/jpeg", fileExtension: "jpg") { tx, attachment in
        try tx.execute(
            sql: "UPDATE checklists SET photo_id = ? WHERE id = ?", arguments: [attachment.id, checklist])
    }
}

/// A custom queue built on the protocol: it forwards to a real queue and counts what the app saves and deletes.
private final class AuditingQueue: AttachmentQueueProtocol {
    let base: AttachmentQueue
    let log = LockedValue<[String]>([])

    init(base: AttachmentQueue) { self.base = base }

    var db: LocalDatabase { base.db }
    var localStorage: any LocalStorageAdapter { base.localStorage }
    var remoteStorage: any RemoteStorageAdapter { base.remoteStorage }

    func startSync() async throws { try await base.startSync() }
    func stopSyncing() async throws { await base.stopSyncing() }
    func close() async throws { await base.close() }
    func syncNow() async throws { try await base.syncNow() }
    func resolveNewAttachmentFilename(attachmentId: String, fileExtension: String?) async throws -> String {
        try base.resolveNewAttachmentFilename(attachmentId: attachmentId, fileExtension: fileExtension)
    }
    func getLocalUri(_ filename: String) async throws -> String { try await base.getLocalUri(filename) }
    func processWatchedAttachments(items: [WatchedAttachmentItem]) async throws {
        try await base.processWatchedAttachments(items: items)
    }
    func saveFile(
        data: Data, mediaType: String?, fileExtension: String?, metaData: String?, id: String?,
        updateHook: @escaping @Sendable (SqlTransaction, AttachmentSync.Attachment) throws -> Void
    ) async throws -> AttachmentSync.Attachment {
        let saved = try await base.saveFile(
            data: data, mediaType: mediaType, fileExtension: fileExtension, metaData: metaData, id: id,
            updateHook: updateHook)
        log.withLock { $0.append("saved \(saved.id)") }
        return saved
    }
    func saveFile(
        fileURL: URL, mediaType: String?, fileExtension: String?, metaData: String?, id: String?, moveFile: Bool,
        updateHook: @escaping @Sendable (SqlTransaction, AttachmentSync.Attachment) throws -> Void
    ) async throws -> AttachmentSync.Attachment {
        try await base.saveFile(
            fileURL: fileURL, mediaType: mediaType, fileExtension: fileExtension, metaData: metaData, id: id,
            moveFile: moveFile, updateHook: updateHook)
    }
    func deleteFile(
        attachmentId: String, updateHook: @escaping @Sendable (SqlTransaction, AttachmentSync.Attachment) throws -> Void
    ) async throws -> AttachmentSync.Attachment {
        log.withLock { $0.append("deleted \(attachmentId)") }
        return try await base.deleteFile(attachmentId: attachmentId, updateHook: updateHook)
    }
    func attachment(id: String) async throws -> AttachmentSync.Attachment? { try await base.attachment(id: id) }
    func download(attachmentId: String) async throws -> AttachmentSync.Attachment {
        try await base.download(attachmentId: attachmentId)
    }
    func purge(attachmentId: String) async throws -> AttachmentSync.Attachment {
        try await base.purge(attachmentId: attachmentId)
    }
    func expireCache() async throws { try await base.expireCache() }
    func clearQueue() async throws { try await base.clearQueue() }
}

@Suite("AttachmentQueueProtocol and the reference implementation's helpers", .cleansUp)
struct QueueProtocolTests {
    @Test("code typed against the protocol saves, syncs and deletes through the queue, or through a custom one")
    func protocolDrivesTheQueue() async throws {
        let device = try QueueHarness()
        let remote = try device.memoryRemote
        try await device.addChecklist("c1", photo: nil)
        let custom = AuditingQueue(base: device.queue)
        for queue in [device.queue as any AttachmentQueueProtocol, custom] {
            let photo = try await attachPhoto(testBytes(300), to: "c1", with: queue)
            try await queue.syncNow()
            #expect(try await queue.attachment(id: photo.id)?.state == .synced)
            #expect(await remote.file(named: photo.filename) == testBytes(300))
            #expect(
                try await device.db.get(sql: "SELECT photo_id FROM checklists WHERE id = 'c1'") {
                    try $0.getString(name: "photo_id")
                } == photo.id)

            let deleted = try await queue.deleteFile(attachmentId: photo.id)
            #expect(deleted.state == .queuedDelete)
            #expect(deleted.localUri == nil, "the local copy goes at once")
            #expect(!FileManager.default.fileExists(atPath: try await queue.getLocalUri(photo.filename)))
            try await queue.syncNow()
            #expect(try await queue.attachment(id: photo.id) == nil)
            #expect(await remote.file(named: photo.filename) == nil)
        }
        #expect(custom.log.withLock { $0.count } == 2)
    }

    @Test("resolveNewAttachmentFilename names files as saveFile does, and refuses names that cannot be files")
    func newFilenames() throws {
        let device = try QueueHarness()
        let id = "3f2a9c1e-0000-4000-8000-000000000001"
        #expect(try device.queue.resolveNewAttachmentFilename(attachmentId: id, fileExtension: "jpg") == "\(id).jpg")
        #expect(try device.queue.resolveNewAttachmentFilename(attachmentId: id, fileExtension: ".png") == "\(id).png")
        #expect(try device.queue.resolveNewAttachmentFilename(attachmentId: id, fileExtension: nil) == id)
        for (badId, ext) in [("a.b", "jpg"), ("../x", "jpg"), ("", "jpg"), (id, "a/b")] {
            let error = #expect(throws: AttachmentError.self) {
                try device.queue.resolveNewAttachmentFilename(attachmentId: badId, fileExtension: ext)
            }
            #expect(error?.code == .invalidName, "\(badId).\(ext)")
        }
    }

    @Test("getLocalUri finds where a file really is, escaped names included, and refuses paths outside")
    func localUris() async throws {
        let device = try QueueHarness()
        let folder = device.attachmentsPath
        let plain = try await device.queue.saveFile(data: testBytes(10), mediaType: nil, fileExtension: "jpg")
        let named = try await device.queue.saveFile(
            data: testBytes(20), mediaType: nil, fileExtension: "jpg", id: "Photo")

        #expect(try await device.queue.getLocalUri(plain.filename) == plain.localUri)
        // `Photo` is kept as `^photo.jpg`: joining the folder and "Photo.jpg" would name the wrong file.
        let escaped = try await device.queue.getLocalUri(named.filename)
        #expect(escaped == named.localUri)
        #expect(escaped == (folder as NSString).appendingPathComponent("^photo.jpg"))
        #expect(FileManager.default.contents(atPath: escaped) == testBytes(20))
        // No record yet: where `<id>.<ext>` would be kept.
        #expect(
            try await device.queue.getLocalUri("Other.png") == (folder as NSString).appendingPathComponent("^other.png")
        )
        for bad in ["../etc/passwd", "a/b.jpg", ""] {
            let error = await #expect(throws: AttachmentError.self) { _ = try await device.queue.getLocalUri(bad) }
            #expect(error?.code == .invalidName, "\(bad)")
        }
    }

    @Test("processWatchedAttachments reconciles a queue that has no watch: downloads, archives, restores")
    func processWatchedAttachments() async throws {
        let device = try QueueHarness()
        let remote = try device.memoryRemote
        await remote.setFile(testBytes(500), named: "a.jpg")
        await remote.setFile(testBytes(600), named: "b.jpg")
        let a = try WatchedAttachmentItem(id: "a", fileExtension: "jpg")
        let b = try WatchedAttachmentItem(id: "b", fileExtension: "jpg")

        try await device.queue.processWatchedAttachments(items: [a, b])
        try await device.queue.syncNow()
        #expect(try await device.state(of: "a") == .synced)
        #expect(device.bytesOnDisk("b.jpg") == testBytes(600))

        try await device.queue.processWatchedAttachments(items: [a])
        #expect(try await device.state(of: "b") == .archived)
        try await device.queue.processWatchedAttachments(items: [a, b])
        #expect(try await device.state(of: "b") == .synced, "restored from the archive without a download")
        #expect(await remote.downloadCount == 2)

        // A bad item changes nothing and is named.
        let decomposed = try WatchedAttachmentItem(id: "cafe\u{301}", fileExtension: "jpg")
        let error = await #expect(throws: AttachmentError.self) {
            try await device.queue.processWatchedAttachments(items: [decomposed])
        }
        #expect(error?.code == .invalidName)
        #expect(error?.attachmentId == "cafe\u{301}")
        #expect(try await device.state(of: "a") == .synced, "not archived by the refused call")
        #expect(try await device.state(of: "b") == .synced)
    }
}

/// Local storage written against the protocol's required methods only (no `rmDir`, no `copyFile`), keeping
/// files in memory.
private actor MinimalStorage: LocalStorageAdapter {
    var files: [String: Data] = [:]

    func saveFile(filePath: String, data: Data) async throws -> Int64 {
        files[filePath] = data
        return Int64(data.count)
    }
    func readFile(filePath: String, mediaType: String?) async throws -> Data {
        guard let data = files[filePath] else {
            throw AttachmentError(code: .localFileNotFound, message: "no \(filePath)", path: filePath)
        }
        return data
    }
    func deleteFile(filePath: String) async throws { files[filePath] = nil }
    func fileExists(filePath: String) async throws -> Bool {
        files[filePath] != nil || files.keys.contains { $0.hasPrefix(filePath + "/") }
    }
    func fileSize(filePath: String) async throws -> Int64? { files[filePath].map { Int64($0.count) } }
    func makeDir(path: String) async throws {}
    func moveFile(sourcePath: String, targetPath: String) async throws {
        files[targetPath] = files.removeValue(forKey: sourcePath)
    }
    func listDirectory(path: String) async throws -> [String] {
        files.keys.filter { $0.hasPrefix(path + "/") }.map { String($0.dropFirst(path.count + 1)) }
    }
}

@Suite("Smaller conveniences", .cleansUp)
struct QueueConvenienceTests {
    @Test("an adapter without rmDir and copyFile compiles; copyFile copies, rmDir refuses a folder it cannot remove")
    func localStorageDefaults() async throws {
        let storage = MinimalStorage()
        _ = try await storage.saveFile(filePath: "/a/one", data: Data("one".utf8))
        try await storage.copyFile(sourcePath: "/a/one", targetPath: "/a/two")
        #expect(try await storage.readFile(filePath: "/a/two", mediaType: nil) == Data("one".utf8))
        try await storage.rmDir(path: "/nothing-here")
        let error = await #expect(throws: AttachmentError.self) { try await storage.rmDir(path: "/a") }
        #expect(error?.code == .unsupported)
        #expect(error?.message.contains("/a") == true)
    }

    @Test("withAttachmentQueue closes the queue when its body returns and when it throws")
    func scopedQueueIsClosed() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: QueueHarness.schema)
        let remote = InMemoryRemoteStorage()
        let configuration = AttachmentQueue.Configuration(attachmentsDirectory: folder.path("attachments"))
        let (kept, photo) = try await withAttachmentQueue(db: db, remoteStorage: remote, configuration: configuration) {
            queue in
            let photo = try await queue.saveFile(data: testBytes(100), mediaType: nil, fileExtension: "jpg")
            try await queue.syncNow()
            return (queue, photo)
        }
        #expect(await remote.file(named: photo.filename) == testBytes(100))
        let closed = await #expect(throws: AttachmentError.self) {
            try await kept.saveFile(data: testBytes(1), mediaType: nil, fileExtension: "jpg")
        }
        #expect(closed?.code == .closed)

        let leaked = LockedValue<AttachmentQueue?>(nil)
        await #expect(throws: InjectedFailure.self) {
            try await withAttachmentQueue(db: db, remoteStorage: remote, configuration: configuration) { queue in
                leaked.withLock { $0 = queue }
                throw InjectedFailure("the work failed")
            }
        }
        let afterThrow = await #expect(throws: AttachmentError.self) {
            try await leaked.withLock { $0 }?.saveFile(data: testBytes(1), mediaType: nil, fileExtension: "jpg")
        }
        #expect(afterThrow?.code == .closed)
        try await db.close()
    }
}
