import AttachmentSyncTesting
import Foundation
import Testing

@testable import AttachmentSync

// The seed docs' adapter and handler, as users write them (`final`, as Swift 6 requires for a Sendable
// class; the docs' bodies were TODOs).
final class RemoteStorage: RemoteStorageAdapter {
    let backing = InMemoryRemoteStorage()

    func uploadFile(data: Data, attachment: AttachmentSync.Attachment) async throws {
        try await backing.uploadFile(data: data, attachment: attachment)
    }

    func downloadFile(attachment: AttachmentSync.Attachment) async throws -> Data {
        try await backing.downloadFile(attachment: attachment)
    }

    func deleteFile(attachment: AttachmentSync.Attachment) async throws {
        try await backing.deleteFile(attachment: attachment)
    }
}

final class ErrorHandler: SyncErrorHandler {
    func onDownloadError(attachment: AttachmentSync.Attachment, error: Error) async -> Bool { true }
    func onUploadError(attachment: AttachmentSync.Attachment, error: Error) async -> Bool { true }
    func onDeleteError(attachment: AttachmentSync.Attachment, error: Error) async -> Bool { true }
}

@Suite("Seed snippets: the queue")
struct QueueSeedSnippetTests {
    @Test("the docs' queue construction, startSync and saveFile compile and upload")
    func newerDocsSnippet() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: QueueHarness.schema)
        defer { try? db.close() }
        let checklistId = "c1"
        try await db.execute(sql: "INSERT INTO checklists (id, description) VALUES (?, 'x')", parameters: [checklistId])

        // --- from the docs ---
        func getAttachmentsDirectoryPath() throws -> String {
            guard let documentsURL = Optional(folder.url) else {
                throw PowerSyncAttachmentError.attachmentError("Could not determine attachments directory path")
            }
            return documentsURL.appendingPathComponent("attachments").path
        }

        let remote = RemoteStorage()
        let queue = AttachmentQueue(
            db: db,
            attachmentsDirectory: try getAttachmentsDirectoryPath(),
            remoteStorage: remote,
            watchAttachments: {
                try db.watch(
                    options: WatchOptions(
                        sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL",
                        parameters: [],
                        mapper: { cursor in
                            try WatchedAttachmentItem(
                                id: cursor.getString(name: "photo_id"),
                                fileExtension: "jpg"
                            )
                        }
                    )
                )
            }
        )

        try await queue.startSync()

        try await queue.saveFile(
            data: Data([1, 2, 3]),  // The attachment's data
            mediaType: "image/jpg",
            fileExtension: "jpg"
        ) { tx, attachment in
            // Assign the attachment ID to a checklist item in the same transaction
            try tx.execute(
                sql: """
                    UPDATE
                        checklists
                    SET
                        photo_id = ?
                    WHERE
                        id = ?
                    """,
                arguments: [attachment.id, checklistId]
            )
        }
        // --- ours ---
        try await queue.syncNow()
        let photoId = try await db.get(sql: "SELECT photo_id FROM checklists WHERE id = 'c1'") {
            try $0.getString(name: "photo_id")
        }
        #expect(try await queue.attachment(id: photoId)?.state == .synced)
        #expect(await remote.backing.file(named: "\(photoId).jpg") == Data([1, 2, 3]))
        await queue.close()
    }

    @Test("the docs' queue with an error handler and no watch, and the older docs' stream form, compile")
    func otherSnippets() async throws {
        let folder = try TemporaryDirectory()
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: QueueHarness.schema)
        defer { try? db.close() }
        let attachmentsDirectory = folder.path("attachments")
        let remoteStorage = RemoteStorage()

        let queue = AttachmentQueue(
            db: db,
            attachmentsDirectory: attachmentsDirectory,
            remoteStorage: remoteStorage,
            errorHandler: ErrorHandler()
        )
        try await queue.waitForInit()
        await queue.close()

        let older = AttachmentQueue(
            db: db,
            attachmentsDirectory: attachmentsDirectory,
            remoteStorage: RemoteStorage(),
            watchedAttachments: try db.watch(
                options: WatchOptions(
                    sql: "SELECT photo_id FROM checklists WHERE photo_id IS NOT NULL",
                    parameters: [],
                    mapper: { cursor in
                        try WatchedAttachmentItem(
                            id: cursor.getString(name: "photo_id"),
                            fileExtension: "jpg"
                        )
                    }
                )
            )
        )
        try await older.startSync()
        await older.stopSyncing()
        await older.close()
    }
}
