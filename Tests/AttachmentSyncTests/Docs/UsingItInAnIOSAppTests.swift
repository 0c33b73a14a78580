import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The "Using it in an iOS app" article's code: every `swift` block that uses no Apple-only API (UIKit,
/// SwiftUI, App Groups) must appear in this file, where it is compiled and run as an app and its share
/// extension would, two queues on one database and folder.
@Suite("Using it in an iOS app article", .cleansUp)
struct UsingItInAnIOSAppTests {
    static let articlePath = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
        .appendingPathComponent("Sources/AttachmentSync/Documentation.docc/UsingItInAnIOSApp.md")
    static let appleOnly = ["containerURL", "scenePhase", "UIApplication"]
    /// Blocks that use the HTTP module, compiled and run in its tests (`UsingItInAnIOSAppHTTPTests`).
    static let httpModule = ["URLSessionTransferService"]

    @Test("every code block without an Apple-only API is in this file")
    func articleCodeIsHere() throws {
        let blocks = try ArticleCode.blocks(ofArticleAt: Self.articlePath)
        #expect(blocks.count == 8)
        let source = ArticleCode.normalized(try String(contentsOfFile: #filePath, encoding: .utf8))
        for block in blocks where !(Self.appleOnly + Self.httpModule).contains(where: block.contains) {
            if !source.contains(ArticleCode.normalized(block)) { Issue.record("not compiled here:\n\(block)") }
        }
    }

    func openAttachments(in container: URL, remote: any RemoteStorageAdapter) throws -> (LocalDatabase, AttachmentQueue)
    {
        let db = try LocalDatabase(
            path: container.appendingPathComponent("app.sqlite").path,
            schema: Schema(tables: [
                Table(name: "defects", columns: [.text("note"), .text("photo_id")]),
                createAttachmentTable(),
            ])
        )
        var configuration = AttachmentQueue.Configuration(
            attachmentsDirectory: container.appendingPathComponent("attachments").path)
        // Readable while the device is locked, once the user has unlocked it after a restart.
        configuration.fileProtection = .completeUntilFirstUserAuthentication
        // Downloaded attachments can be fetched again: keep them out of iCloud backups.
        configuration.excludesDownloadsFromBackup = true
        let queue = AttachmentQueue(db: db, remoteStorage: remote, configuration: configuration)
        return (db, queue)
    }

    func savePhotoSharedIntoTheApp(_ photoURL: URL, note: String, queue: AttachmentQueue) async throws {
        try await queue.saveFile(fileURL: photoURL, mediaType: "image/jpeg", moveFile: true) { tx, attachment in
            try tx.execute(
                sql: "INSERT INTO defects (id, note, photo_id) VALUES (?, ?, ?)",
                arguments: [UUID().uuidString, note, attachment.id]
            )
        }
        try await queue.syncNow()
        await queue.close()
    }

    func extensionConfiguration(_ base: AttachmentQueue.Configuration) -> AttachmentQueue.Configuration {
        var configuration = base
        configuration.maxConcurrentTransfers = 1
        return configuration
    }

    @Test("the app syncs and suspends; its share extension saves and uploads while the app is away")
    func appAndShareExtension() async throws {
        let container = try TemporaryDirectory()
        let remote = FileSystemRemoteStorage(directory: container.url.appendingPathComponent("remote"))
        let (appDb, app) = try openAttachments(in: container.url, remote: remote)
        try await app.startSync()
        // The user leaves the app: it gives the lease up.
        await app.suspend()

        // Meanwhile the share extension, another process on the same container, saves a photo and uploads it.
        let (extensionDb, shareExtension) = try openAttachments(in: container.url, remote: remote)
        let photo = container.url.appendingPathComponent("shared.jpg")
        try testBytes(5000).write(to: photo)
        try await savePhotoSharedIntoTheApp(photo, note: "cracked tile", queue: shareExtension)
        try await extensionDb.close()
        #expect(!FileManager.default.fileExists(atPath: photo.path), "moved into the attachments")

        try await app.resume()
        let rows = try await appDb.getAll(sql: "SELECT photo_id FROM defects") { try $0.getString(name: "photo_id") }
        #expect(rows.count == 1)
        let saved = try #require(try await app.attachment(id: rows[0]))
        #expect(saved.state == .synced, "the extension uploaded it while the app was suspended")
        #expect(FileManager.default.contents(atPath: try remote.fileURL(for: saved).path) == testBytes(5000))
        #expect(extensionConfiguration(app.configuration).maxConcurrentTransfers == 1)
        await app.close()
        try await appDb.close()
    }
}
