import AttachmentSyncTesting
import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The Getting Started article's code, compiled and run: every `swift` block of the article must appear
/// in this file (indentation aside), so the article cannot drift from code that builds.
@Suite("Getting Started article", .cleansUp)
struct GettingStartedTests {
    static let articlePath = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent()
        .appendingPathComponent("Sources/AttachmentSync/Documentation.docc/GettingStarted.md")

    @Test("every code block of the article is in this file")
    func articleCodeIsHere() throws {
        #expect(try ArticleCode.blocks(ofArticleAt: Self.articlePath).count == 5)
        for block in try ArticleCode.blocksMissing(ofArticleAt: Self.articlePath, fromSourceAt: #filePath) {
            Issue.record("not compiled here:\n\(block)")
        }
    }

    @Test("the article's code saves, uploads, fetches on demand and purges")
    func articleCodeRuns() async throws {
        let temporary = try TemporaryDirectory()
        let folder = temporary.url
        let jpeg = testBytes(3000, seed: 1)
        let videoId = "video-1"
        let videoBytes = testBytes(64 * 1024, seed: 2)
        let remoteFolder = folder.appendingPathComponent("remote")
        try FileManager.default.createDirectory(at: remoteFolder, withIntermediateDirectories: true)
        try videoBytes.write(to: remoteFolder.appendingPathComponent("\(videoId).jpg"))

        // The article, block by block.
        let checklists = Table(
            name: "checklists", columns: [.text("description"), .text("photo_id"), .text("photo_type")])
        let db = try LocalDatabase(
            path: folder.appendingPathComponent("app.sqlite").path,
            schema: Schema(tables: [checklists, createAttachmentTable()])
        )
        var configuration = AttachmentQueue.Configuration(
            attachmentsDirectory: folder.appendingPathComponent("attachments").path)
        configuration.downloadPolicy = .custom { item in
            item.mediaType?.hasPrefix("video/") == true ? .onDemand : .eager
        }
        let queue = AttachmentQueue(
            db: db,
            remoteStorage: FileSystemRemoteStorage(directory: folder.appendingPathComponent("remote")),
            configuration: configuration,
            watchAttachments: {
                try db.watch(sql: "SELECT photo_id, photo_type FROM checklists WHERE photo_id IS NOT NULL") { cursor in
                    try WatchedAttachmentItem(
                        id: cursor.getString(name: "photo_id"), fileExtension: "jpg",
                        mediaType: cursor.getStringOptional(name: "photo_type"))
                }
            }
        )
        try await queue.startSync()
        TestCleanup.add {
            await queue.close()
            try? await db.close()
        }

        let photo = try await queue.saveFile(data: jpeg, mediaType: "image/jpeg", fileExtension: "jpg") {
            tx, attachment in
            try tx.execute(
                sql: "INSERT INTO checklists (id, description, photo_id, photo_type) VALUES (?, ?, ?, ?)",
                arguments: ["fire-exit", "Fire exit unobstructed", attachment.id, "image/jpeg"])
        }

        // (Another device's row refers to a video; its record appears, remote-only.)
        try await db.execute(
            sql: "INSERT INTO checklists (id, description, photo_id, photo_type) VALUES ('stairs', 'Stairs', ?, ?)",
            parameters: [videoId, "video/mp4"])
        let records = try db.watch(sql: "SELECT state FROM attachments WHERE id = ?", parameters: [videoId]) {
            try $0.getInt(name: "state")
        }
        _ = try await withDeadline("the video's record") { try await records.first { $0 == [3] } }

        let updates = queue.progress(attachmentId: videoId)
        let progressBar = Task {
            for await update in updates {
                print(update.fractionCompleted ?? 0)
            }
        }
        let video = try await queue.download(attachmentId: videoId)
        await progressBar.value

        #expect(video.contentAvailable)
        #expect(FileManager.default.contents(atPath: try #require(video.localUri)) == videoBytes)

        let remoteOnly = try await queue.purge(attachmentId: video.id)

        #expect(!remoteOnly.contentAvailable)
        #expect(!FileManager.default.fileExists(atPath: try #require(video.localUri)))

        try await withDeadline("the status after the upload") {
            for await status in queue.status where status.count(.queuedUpload) == 0 {
                print("all uploaded; \(status.bytesTransferred) bytes moved")
                break
            }
        }

        #expect(
            FileManager.default.contents(atPath: remoteFolder.appendingPathComponent("\(photo.id).jpg").path) == jpeg)
    }
}
