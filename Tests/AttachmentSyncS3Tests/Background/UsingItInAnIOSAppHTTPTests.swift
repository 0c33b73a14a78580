import AttachmentSync
import AttachmentSyncHTTP
import Foundation
import TestSupport
import Testing

/// The "Using it in an iOS app" article's blocks that use the HTTP module (its background transfers): each
/// must appear in this file, where it is compiled and run against Ceph (on Linux the service's transfers run
/// in this process).
@Suite("Using it in an iOS app article: background transfers")
struct UsingItInAnIOSAppHTTPTests {
    static let articlePath = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
        .appendingPathComponent("Sources/AttachmentSync/Documentation.docc/UsingItInAnIOSApp.md")

    @Test("every block of the article that uses URLSessionTransferService without UIKit is in this file")
    func articleCodeIsHere() throws {
        let blocks = try ArticleCode.blocks(ofArticleAt: Self.articlePath)
            .filter { $0.contains("URLSessionTransferService") && !$0.contains("UIApplication") }
        #expect(blocks.count == 1)
        let source = ArticleCode.normalized(try String(contentsOfFile: #filePath, encoding: .utf8))
        for block in blocks where !source.contains(ArticleCode.normalized(block)) {
            Issue.record("not compiled here:\n\(block)")
        }
    }

    func startQueue(
        supportFolder: URL, attachmentsFolder: URL, db: LocalDatabase, remote: any RemoteStorageAdapter
    ) async throws -> (AttachmentQueue, URLSessionTransferService) {
        let transfers = try URLSessionTransferService(
            configuration: .init(
                identifier: "com.example.inspections.attachments",
                folder: supportFolder.appendingPathComponent("transfers")))
        var configuration = AttachmentQueue.Configuration(attachmentsDirectory: attachmentsFolder.path)
        configuration.backgroundTransfers = BackgroundTransfers(service: transfers)
        let queue = AttachmentQueue(db: db, remoteStorage: remote, configuration: configuration)
        try await queue.startSync()
        return (queue, transfers)
    }

    @Test("the article's set-up hands a photo to the service and counts it synced once it is stored")
    func articleSetUpRuns() async throws {
        try await S3TestBucket.with("article-background", transport: .urlSession) { storage, _ in
            try await withTemporaryDirectory { folder in
                let db = try LocalDatabase(
                    path: folder.appendingPathComponent("app.sqlite").path,
                    schema: Schema(tables: [createAttachmentTable()]))
                let (queue, transfers) = try await startQueue(
                    supportFolder: folder, attachmentsFolder: folder.appendingPathComponent("attachments"), db: db,
                    remote: storage)
                let content = testBytes(count: 50_000, seed: 77)
                let events = queue.events
                let photo = try await queue.saveFile(data: content, mediaType: "image/jpeg", fileExtension: "jpg")
                try await withDeadline("the photo handed off, then uploaded") {
                    var handedOff = false
                    for await event in events where event.attachmentId == photo.id {
                        if case .handedOff = event { handedOff = true }
                        if case .uploaded = event { break }
                    }
                    #expect(handedOff)
                }
                #expect(try await queue.attachment(id: photo.id)?.state == .synced)
                let stored = try await storage.downloadFile(
                    attachment: BackgroundRequestTests.attachment(photo.filename, content))
                #expect(stored == content)
                await queue.close()
                transfers.invalidateAndCancel()
                try await db.close()
            }
        }
    }
}
