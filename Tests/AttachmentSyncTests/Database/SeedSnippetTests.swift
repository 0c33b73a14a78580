import Foundation
import TestSupport
import Testing

@testable import AttachmentSync

/// The seed docs' schema, watch and update-hook snippets, copied as users will write them: only the
/// database's construction is ours.
@Suite("Seed snippets")
struct SeedSnippetTests {
    @Test("the docs' checklist schema and photo watch compile and emit the watched items")
    func schemaAndWatchSnippet() async throws {
        let folder = try TemporaryDirectory()

        // --- from the docs ---
        let checklists = Table(
            name: "checklists",
            columns: [
                Column.text("description"),
                Column.integer("completed"),
                Column.text("photo_id"),
            ]
        )

        let schema = Schema(
            tables: [
                checklists,
                createAttachmentTable(name: "attachments"),  // Includes the table which stores attachment states
            ]
        )
        // --- ours ---
        let db = try LocalDatabase(path: folder.path("app.sqlite"), schema: schema)
        defer { try? db.close() }

        // --- from the docs ---
        let watchAttachments = {
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
        // --- ours ---
        let items = try watchAttachments()
        #expect(try await withDeadline("the initial items") { try await items.first { _ in true } }.isEmpty)

        let checklistId = "checklist-1"
        try await db.execute(
            sql: "INSERT INTO checklists (id, description, completed) VALUES (?, ?, ?)",
            parameters: [checklistId, "Check the extinguishers", 0]
        )
        let attachmentId = "photo-1"
        try await db.writeTransaction { tx in
            // --- the docs' update hook body ---
            try tx.execute(
                sql: """
                    UPDATE
                        checklists
                    SET
                        photo_id = ?
                    WHERE
                        id = ?
                    """,
                arguments: [attachmentId, checklistId]
            )
        }

        let watched = try await withDeadline("the photo's item") { try await items.first { !$0.isEmpty } }
        #expect(watched.count == 1)
        #expect(watched.first?.id == "photo-1")
        #expect(watched.first?.fileExtension == "jpg")
        #expect(watched.first?.resolvedFilename == "photo-1.jpg")
    }

    @Test("a watched item with neither extension nor filename is a typed error, not a crash")
    func watchedItemNeedsAName() throws {
        let error = try #require(throws: AttachmentError.self) { try WatchedAttachmentItem(id: "x") }
        #expect(error.code == .invalidWatchedItem)
        #expect(error.attachmentId == "x")
        #expect(try WatchedAttachmentItem(id: "y", filename: "scan.pdf").resolvedFilename == "scan.pdf")
    }
}
